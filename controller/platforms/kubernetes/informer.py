"""An informer: the latest copy of each object of one kind in a namespace, kept current by
list-then-watch; waits on it are level-triggered."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import anyio

from controller.platforms.kubernetes.api import KubeError, Obj

if TYPE_CHECKING:
    from controller.platforms.kubernetes.kube import Kube

T = TypeVar("T")


class Informer:
    """The latest copy of each object of one kind in a namespace, kept by list-then-watch.

    ``run()`` keeps it current (relisting after an expired watch); ``until(check)`` waits,
    level-triggered, until ``check(objects)`` returns something other than ``None``.
    ``notify(obj)`` is called after each change with the changed object, or ``None`` after a
    (re)list, when anything may have changed. With ``index``, a label key, ``labelled(value)``
    finds the objects carrying that label value without a scan (a run's pods by agent).
    """

    def __init__(
        self,
        kube: Kube,
        kind: str,
        namespace: str,
        *,
        label_selector: str | None = None,
        notify: Callable[[Obj | None], None] | None = None,
        index: str | None = None,
    ) -> None:
        self.kube = kube
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.notify = notify
        self.objects: dict[str, Obj] = {}
        self.deleted: dict[str, Obj] = {}
        """The last copy of objects seen deleted, by name."""
        self.synced = anyio.Event()
        self.error: BaseException | None = None
        self._changed = anyio.Event()
        self._index = index
        self._indexed: dict[str, dict[str, Obj]] = {}
        """Label value -> name -> object, for objects of ``objects`` carrying the label."""

    def labelled(self, value: str) -> list[Obj]:
        """The current objects whose ``index`` label has ``value``."""
        return list(self._indexed.get(value, {}).values())

    def _put(self, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        self._drop(name)
        self.objects[name] = obj
        if self._index is not None:
            value = (obj["metadata"].get("labels") or {}).get(self._index)
            if value is not None:
                self._indexed.setdefault(value, {})[name] = obj

    def _drop(self, name: str) -> None:
        old = self.objects.pop(name, None)
        if old is not None and self._index is not None:
            value = (old["metadata"].get("labels") or {}).get(self._index)
            if value is not None:
                self._indexed.get(value, {}).pop(name, None)

    async def run(self) -> None:
        """Keep the cache current; API errors are retried (a watch is level-triggered)."""
        while True:
            try:
                await self._sync()
            except Exception as exc:  # the API server's refusal or a dropped connection
                self.error = exc
                await anyio.sleep(1.0)

    async def _sync(self) -> None:
        while True:
            items, version = await self.kube.list(
                self.kind, self.namespace, label_selector=self.label_selector
            )
            seen = {item["metadata"]["name"]: item for item in items}
            for name in set(self.objects) - set(seen):
                self.deleted[name] = self.objects[name]
            self.objects, self._indexed = {}, {}
            for item in items:
                self._put(item)
            self.synced.set()
            self._notify(None)
            try:
                while True:
                    async for kind, obj in self.kube.watch(
                        self.kind,
                        self.namespace,
                        resource_version=version,
                        label_selector=self.label_selector,
                    ):
                        version = obj.get("metadata", {}).get("resourceVersion") or version
                        if kind == "BOOKMARK":
                            continue
                        name = obj["metadata"]["name"]
                        if kind == "DELETED":
                            self._drop(name)
                            self.deleted[name] = obj
                        else:
                            self._put(obj)
                            self.deleted.pop(name, None)
                        self._notify(obj)
            except KubeError as exc:
                if exc.status != 410:  # 410 Gone: the version expired; relist
                    raise

    def _notify(self, changed: Obj | None) -> None:
        self.error = None
        self._changed.set()
        self._changed = anyio.Event()
        if self.notify is not None:
            self.notify(changed)

    async def until(self, check: Callable[[Informer], T | None]) -> T:
        """Wait until ``check(self)`` is not ``None``; re-evaluated after every change."""
        await self.synced.wait()
        while True:
            changed = self._changed
            result = check(self)
            if result is not None:
                return result
            await changed.wait()
