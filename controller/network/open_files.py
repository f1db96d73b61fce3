"""The process's open-files limit: a router holds one socket per session, so it needs many.

Many systems start processes with a soft limit of 1,024 descriptors under a much higher hard
limit; a router with 1,000 sessions (plus the ledger, the listener, TLS and the agents' pipes)
would fail to accept with ``EMFILE``. Like the Go runtime does at start-up, the router raises
its soft limit to the hard limit, which needs no privilege.
"""

from __future__ import annotations

import resource


def raise_open_files_limit() -> int:
    """Raise the soft open-files limit to the hard limit; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return soft  # a sandbox may forbid it; the router then serves within what it has
    return hard
