"""What the Kubernetes tests need of a cluster, whichever it is: the kind cluster whose pods run
(kind_plane.KindPlane) or KWOK's fake nodes inside it (kind_kwok.KwokPlane); and the poll they
wait with.

Test-only: nothing here is imported by ``controller``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol


class Plane(Protocol):
    """A cluster the tests reach as its admin."""

    @property
    def kubeconfig(self) -> Path: ...

    def api_client(self) -> Any:
        """A new admin ``kubernetes.client.ApiClient``."""
        ...


def wait_until(what: str, probe: Callable[[], Any], timeout: float) -> Any:
    """Poll ``probe`` every 0.25 s until it returns a truthy value and return that; an exception
    from it means "not yet". After ``timeout`` seconds fail, naming ``what`` and the last error."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except Exception as exc:  # any probe failure means "not yet"
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(0.25)
