"""The local platform: one sandboxed child process per agent, on this machine.

``platform`` is the ``Platform`` itself; ``sandbox`` and ``isolation`` confine a child (bubblewrap
namespaces, cgroup limits), ``launch`` starts it, ``reap`` kills what a run left, ``harvest``
copies its declared files, ``capacity`` admits a roster and ``sockets`` hold the run's bridges.
"""

from controller.platforms.local.capacity import LocalCapacity
from controller.platforms.local.platform import LocalPlatform, LocalSession
from controller.platforms.local.reap import reap_run, reap_stale_runs

__all__ = ["LocalCapacity", "LocalPlatform", "LocalSession", "reap_run", "reap_stale_runs"]
