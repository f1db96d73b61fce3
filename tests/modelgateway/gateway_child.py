"""A model gateway in a process of its own, so that a test can measure that process's memory.

Prints one JSON line (``baseUrl`` and two agents' tokens), then serves until stdin closes.
"""

from __future__ import annotations

import json
import sys

import anyio
from fake_provider import FakeProviderServer

from controller.modelgateway import ModelGateway, ProviderConfig


class DiscardingLedger:
    async def append(self, event: object, *, producer: str) -> None:
        pass


async def main() -> None:
    with FakeProviderServer() as fake:
        provider = ProviderConfig(
            name="fake", base_url=fake.base_url, model="fake-model", api_key_name=None
        )
        async with ModelGateway([provider], ledger=DiscardingLedger()) as gateway:
            tokens = {name: gateway.issue_token(name) for name in ("mallory", "alice")}
            print(json.dumps({"baseUrl": gateway.base_url, "tokens": tokens}), flush=True)
            await anyio.to_thread.run_sync(sys.stdin.read)


if __name__ == "__main__":
    anyio.run(main)
