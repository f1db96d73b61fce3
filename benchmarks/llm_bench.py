"""Gateway overhead on the real local model: tokens/s and calls/s through the gateway vs direct.

One LocalModelServer (llama.cpp + SmolLM2-135M) is shared by every client. For 1, 4 and 8
concurrent clients the same requests go once straight to the model server (the same-run baseline)
and once through the ModelGateway, which authenticates, paces, forwards, measures and appends one
event per call to a real ledger. Each repeat runs both paths, the first path alternating between
repeats, and the rounds are summed, so drift in the machine's load hits both paths alike.

    python benchmarks/llm_bench.py [--calls-per-client 4] [--max-tokens 64] [--repeats 2]

Needs scripts/install-llm.sh. Not a test: it prints a table and exits.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import httpx

from controller.modelgateway import ModelGateway, model_gateway_catalog
from controller.platforms.local_model import LocalModelServer
from ledger import Provenance, open_ledger_writer

PROMPT = "Write a short story about a robot who learns to paint."


@dataclass(frozen=True)
class Round:
    calls: int
    completion_tokens: int
    seconds: float

    def __add__(self, other: Round) -> Round:
        return Round(
            self.calls + other.calls,
            self.completion_tokens + other.completion_tokens,
            self.seconds + other.seconds,
        )

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.seconds

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.seconds


async def run_round(
    base_url: str, tokens: list[str], model: str, calls_per_client: int, max_tokens: int
) -> Round:
    """Every client sends ``calls_per_client`` calls one after another; clients run concurrently."""
    completion_tokens = 0

    async def client(token: str) -> None:
        nonlocal completion_tokens
        headers = {"authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=600) as http:
            for _ in range(calls_per_client):
                response = await http.post(
                    "/chat/completions",
                    json={
                        "model": model,
                        "messages": [{"role": "user", "content": PROMPT}],
                        "max_tokens": max_tokens,
                        "temperature": 0,
                    },
                )
                response.raise_for_status()
                completion_tokens += response.json()["usage"]["completion_tokens"]

    started = time.perf_counter()
    async with anyio.create_task_group() as clients:
        for token in tokens:
            clients.start_soon(client, token)
    return Round(len(tokens) * calls_per_client, completion_tokens, time.perf_counter() - started)


async def main(
    calls_per_client: int, max_tokens: int, concurrency: list[int], repeats: int
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        async with (
            open_ledger_writer(
                Path(scratch) / "ledger",
                catalog=model_gateway_catalog,
                definition_id="benchmarks.llm_bench",
                run_id="sr-" + "0" * 32,
                provenance=Provenance.current("local"),
            ) as writer,
            LocalModelServer() as server,
        ):
            provider = replace(server.provider(), max_concurrency=max(concurrency))
            async with ModelGateway(
                [provider], ledger=writer, credentials=server.credentials
            ) as gateway:
                model_key = server.credentials["SOCIETY_LOCAL_MODEL_KEY"]
                warm = await run_round(server.base_url, [model_key], server.model_id, 1, max_tokens)
                print(f"model server pid {server.pid}; warm-up call {warm.seconds:.2f} s")
                print(
                    f"{'clients':>7} {'path':>8} {'calls':>5} {'tokens':>6} {'seconds':>8} "
                    f"{'tok/s':>7} {'calls/s':>7}"
                )
                for clients in concurrency:
                    agent_tokens = [gateway.issue_token(f"agent-{i}") for i in range(clients)]
                    paths = {
                        "direct": (server.base_url, [model_key] * clients),
                        "gateway": (gateway.base_url, agent_tokens),
                    }
                    totals = dict.fromkeys(paths, Round(0, 0, 0.0))
                    for repeat in range(repeats):
                        order = list(paths) if repeat % 2 == 0 else list(reversed(paths))
                        for path in order:
                            base_url, tokens = paths[path]
                            totals[path] += await run_round(
                                base_url, tokens, server.model_id, calls_per_client, max_tokens
                            )
                    direct, through = totals["direct"], totals["gateway"]
                    for path, result in (("direct", direct), ("gateway", through)):
                        print(
                            f"{clients:>7} {path:>8} {result.calls:>5} "
                            f"{result.completion_tokens:>6} {result.seconds:>8.2f} "
                            f"{result.tokens_per_s:>7.1f} {result.calls_per_s:>7.2f}"
                        )
                    print(
                        f"{clients:>7} {'ratio':>8}  gateway/direct: tokens/s "
                        f"{through.tokens_per_s / direct.tokens_per_s:.3f}, calls/s "
                        f"{through.calls_per_s / direct.calls_per_s:.3f}"
                    )
                total = gateway.usage_summary().total
                print(
                    f"gateway recorded {total.calls} calls, {total.completion_tokens} completion "
                    f"tokens, cost {total.cost_usd} USD"
                )
            await writer.complete()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls-per-client", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    anyio.run(main, args.calls_per_client, args.max_tokens, args.concurrency, args.repeats)
