"""What the local sandbox's hardening costs an agent's start: seccomp filter, options read from
descriptors (``bwrap --args``) and the fresh session keyring, against the same bubblewrap sandbox
without them, in the same run.

Each round starts one sandbox of each kind, alternating, around ``python -c pass`` (the agent's
interpreter, its code bound read-only, a private working directory), and waits for it to exit.
Prints the median wall time of each and the ratio.

    .venv/bin/python benchmarks/sandbox_start_bench.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from controller.platforms.local.launch import fresh_session_keyring
from controller.platforms.local.sandbox import (
    FIRST_AGENT_UID,
    Bubblewrap,
    _memory_file,
    python_executable,
    seal,
)


def plain(bwrap: Bubblewrap, inner: list[str], workdir: Path) -> float:
    """The same sandbox without the hardening: options on argv, no filter, no fresh keyring."""
    fd = _memory_file("society-seccomp", bwrap.seccomp)
    try:
        argv = bwrap.command(inner, workdir=workdir, sockets=(), uid=FIRST_AGENT_UID, seccomp_fd=fd)
    finally:
        os.close(fd)
    at = argv.index("--seccomp")
    del argv[at : at + 2]
    started = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - started


def hardened(bwrap: Bubblewrap, inner: list[str], workdir: Path) -> float:
    """What ``LocalSession`` starts: sealed options, the filter, a fresh session keyring."""
    sealed = seal(bwrap, inner, workdir=workdir, sockets=(), uid=FIRST_AGENT_UID)
    try:
        started = time.perf_counter()
        subprocess.run(fresh_session_keyring(sealed.argv), check=True, pass_fds=sealed.fds)
        return time.perf_counter() - started
    finally:
        sealed.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    rounds = parser.parse_args().rounds
    bwrap = Bubblewrap.probe()
    inner = [python_executable(), "-c", "pass"]
    base: list[float] = []
    measured: list[float] = []
    with tempfile.TemporaryDirectory(prefix="society-bench-") as scratch:
        workdir = Path(scratch)
        workdir.chmod(0o777)
        for _ in range(rounds):
            base.append(plain(bwrap, inner, workdir))
            measured.append(hardened(bwrap, inner, workdir))
    b, m = statistics.median(base) * 1000, statistics.median(measured) * 1000
    print(f"baseline (bwrap, argv options, no filter, inherited keyring): {b:.1f} ms median")
    print(f"hardened (sealed options, seccomp filter, fresh keyring):     {m:.1f} ms median")
    print(f"ratio {m / b:.2f}x, +{m - b:.1f} ms per agent start ({rounds} rounds each)")


if __name__ == "__main__":
    main()
