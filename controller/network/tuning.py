"""Process-wide tuning for a process that hosts a router, called once at its entry point.

``society run``, the run worker and the controller Job call ``tune_for_router()`` before they
start; so do the router benchmarks. It changes the garbage collector and the GIL for the whole
process, which is why no library call (``Router.serve`` included) does it behind its caller's back.
"""

from __future__ import annotations

import gc
import sys

YOUNG_COLLECTION_THRESHOLD = 10_000
"""Allocations between young-generation collections (CPython's default is 700). A message's
objects live for one group commit; collected every 700 allocations, many of them were still in
flight, survived into older generations and brought on full collections, which at 1,000 sessions
stopped the event loop for 100-250 ms."""

GIL_SWITCH_INTERVAL_S = 0.0005
"""How long a thread waiting for the GIL waits before the running one must hand it over
(CPython's default is 5 ms). A follower's file reads and a writer given its own ``DurableFiles``
run on threads, and each waited for the forced switch while the event loop was busy; with no
thread waiting the interval costs nothing."""

_tuned = False


def tune_for_router() -> None:
    """Freeze the startup heap, raise the young-generation threshold, shorten the GIL switch
    interval; once per process (later calls do nothing).

    Modules, classes and functions (about 48,000 objects) are never garbage, yet every full
    collection walks them: 30-50 ms of stopped event loop on a 2-core machine, which set the
    router's p99 latency. Whatever is garbage at the call is collected first, so nothing dead is
    kept.
    """
    global _tuned
    if _tuned:
        return
    _tuned = True
    gc.collect()
    gc.freeze()
    young, *older = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_COLLECTION_THRESHOLD), *older)
    sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL_S))
