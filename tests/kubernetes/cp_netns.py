"""The real node's network namespace: pod traffic never leaves the machine.

A holder process (``unshare --net``) keeps a fresh network namespace alive; the node's
containerd, kubelet, kube-proxy and kube-router run in it (``nsenter --net``), and so do the
pods' per-pod namespaces' host ends. One veth pair joins it to the host: the host end holds
``host_ip`` (the API server binds there), the node end ``node_ip``. The namespace has no
default route, so nothing in it reaches beyond the host; 169.254.169.254 is an address of
its loopback (a metadata endpoint that a pod must not reach). The host routes the pod range over
the veth, so an out-of-cluster controller reaches pods as on a laptop's kind.

Everything here is per namespace (addresses, routes, firewall rules, ipsets, net.* sysctls):
when the holder and the node's processes are gone, the kernel frees all of it, veth included.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cp_build import ControlPlaneError

METADATA_ADDRESS = "169.254.169.254"
MAX_NODES = 40
_LOCK = Path("/tmp/society-node-index.lock")


def _run(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(
            "node-network", f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}"
        )
    return done.stdout


def _links() -> set[str]:
    return {
        line.split(":")[1].strip().split("@")[0] for line in _run(["ip", "-o", "link"]).splitlines()
    }


@dataclass
class NodeNetwork:
    """One node's namespace and veth; ``create`` it, ``close`` it (idempotent)."""

    index: int
    holder: subprocess.Popen[bytes] | None = None

    @property
    def host_link(self) -> str:
        return f"srnode{self.index}h"

    @property
    def node_link(self) -> str:
        return f"srnode{self.index}n"

    @property
    def host_ip(self) -> str:
        return f"10.250.{self.index}.1"

    @property
    def node_ip(self) -> str:
        return f"10.250.{self.index}.2"

    @property
    def pod_cidr(self) -> str:
        return f"10.{200 + self.index}.0.0/16"

    @property
    def netns_path(self) -> str:
        assert self.holder is not None, "node network not created"
        return f"/proc/{self.holder.pid}/ns/net"

    def enter(self) -> list[str]:
        """The command prefix that runs a program in the node's namespace (nsenter execs it)."""
        return ["nsenter", f"--net={self.netns_path}", "--"]

    def run(self, *argv: str) -> str:
        return _run([*self.enter(), *argv])

    @classmethod
    def create(cls) -> NodeNetwork:
        """A new namespace with its veth on the first free index (a lock serializes choosing)."""
        if os.geteuid() != 0:
            raise ControlPlaneError("node-needs-root", "the real node needs root (namespaces)")
        with _LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            taken = _links()
            index = next((i for i in range(MAX_NODES) if f"srnode{i}h" not in taken), None)
            if index is None:
                raise ControlPlaneError("node-network", f"all {MAX_NODES} node indexes in use")
            network = cls(index)
            try:
                network._create()
            except BaseException:
                network.close()
                raise
        return network

    def _create(self) -> None:
        self.holder = subprocess.Popen(
            ["unshare", "--net", "--", "sleep", "infinity"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        # unshare execs sleep once the namespace exists; until then the link is the host's.
        host_ns = os.stat("/proc/self/ns/net").st_ino
        for _ in range(200):
            with contextlib.suppress(OSError):
                if os.stat(self.netns_path).st_ino != host_ns:
                    break
            if self.holder.poll() is not None:
                raise ControlPlaneError("node-network", "unshare --net exited")
            subprocess.run(["sleep", "0.01"], check=False)
        else:
            raise ControlPlaneError("node-network", "the node's namespace did not appear")
        _run(
            [
                "ip", "link", "add", self.host_link, "type", "veth",
                "peer", "name", self.node_link, "netns", str(self.holder.pid),
            ]
        )  # fmt: skip
        _run(["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_link])
        _run(["ip", "link", "set", self.host_link, "up"])
        self.run("ip", "link", "set", "lo", "up")
        self.run("ip", "addr", "add", f"{self.node_ip}/30", "dev", self.node_link)
        self.run("ip", "link", "set", self.node_link, "up")
        # No dummy links on this kernel: the address sits on the namespace's loopback.
        self.run("ip", "addr", "add", f"{METADATA_ADDRESS}/32", "dev", "lo")
        # Per-namespace sysctls: they go with the namespace.
        self.run("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        _run(["ip", "route", "add", self.pod_cidr, "via", self.node_ip, "dev", self.host_link])

    def close(self) -> None:
        """Stop the holder; the kernel frees the namespace once nothing else is in it."""
        if self.holder is not None and self.holder.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.holder.pid, signal.SIGKILL)
            self.holder.wait(timeout=10)
        if self.host_link in _links():  # a process still in the namespace keeps it
            with contextlib.suppress(ControlPlaneError):
                _run(["ip", "link", "del", self.host_link])
