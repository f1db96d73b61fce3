"""The agents' ClusterQueue sized from the agents' node pool: the sum of the pool's allocatable
CPU and memory, so Kueue admits what the pool can run and no more."""

from __future__ import annotations

from decimal import Decimal

from controller.platforms.kubernetes.api import Obj

_SUFFIXES: dict[str, Decimal] = {
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
    "P": Decimal(10**15), "E": Decimal(10**18),
}  # fmt: skip


def quantity(text: str) -> Decimal:
    """A Kubernetes quantity (``1900m``, ``16Gi``, ``8``) as a number."""
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * _SUFFIXES[suffix]
    return Decimal(text)


def selector_matches(node: Obj, selector: dict[str, str]) -> bool:
    labels = node.get("metadata", {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def pool_quota(nodes: list[Obj], selector: dict[str, str]) -> tuple[str, str, int]:
    """``(cpu, memory, node count)`` of the pool: CPU in millicores, memory in Ki."""
    pool = [node for node in nodes if selector_matches(node, selector)]
    cpu = sum((quantity(n["status"]["allocatable"]["cpu"]) for n in pool), Decimal(0))
    memory = sum((quantity(n["status"]["allocatable"]["memory"]) for n in pool), Decimal(0))
    return f"{int(cpu * 1000)}m", f"{int(memory / 1024)}Ki", len(pool)


def parse_selector(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` as a dict (``ValueError`` naming the bad item)."""
    selector: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{item!r} is not key=value")
        selector[key.strip()] = value.strip()
    return selector
