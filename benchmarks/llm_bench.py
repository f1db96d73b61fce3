"""Gateway overhead on the real local model: tokens/s and calls/s through the gateway vs direct.

One LocalModelServer (llama.cpp + SmolLM2-135M) is shared by every client. For 1, 4 and 8
concurrent clients the same requests go once straight to the model server (the same-run baseline)
and once through the ModelGateway, which authenticates, paces, forwards, measures and appends one
event per call to a real ledger. Each repeat runs both paths, the first path alternating between
repeats, and the rounds are summed, so drift in the machine's load hits both paths alike.

    python benchmarks/llm_bench.py [--calls-per-client 4] [--max-tokens 64] [--repeats 2]

``--society N`` runs ``examples/llm_society.py`` with N residents (5 turns each) on the local
profile instead, verifies and grades its ledger, and then measures in the same run the model
server's own throughput on the society's own work: the bench keeps a copy of every request the
run's gateway forwards (it wraps ``ProviderConnection.chat_completion``; nothing is changed), and
replays ``--rounds`` x slots consecutive ones from the middle of the run straight to a fresh
server sized as the run's, as many at once as it has slots (batched), after as many requests that
came before them in the run (untimed: the slots' prompt caches then hold what the run's held),
then a few one at a time to the one-slot server. It prints the society's wall time (submit to
outcome) and its aggregate completion tokens/s against both. Goals: >= 0.9x the batched replay,
the society in <= 10 minutes. It also prints the server on near-identical prompts padded to the
society's mean length: llama.cpp reuses the cached prefix of a slot's previous prompt, so that
figure is a cache-hit bound, not the server's throughput on a society's distinct prompts.
``--prompt-cache`` shows the difference: the 16-slot server on that prompt set, on prompts of
the same shape with distinct talk, and on the first set with llama.cpp's prompt cache off.

    python benchmarks/llm_bench.py --society 100 [--turns 5]

Needs scripts/install-llm.sh. Not a test: it prints a table and exits.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import httpx

from controller.modelgateway import ModelGateway, model_gateway_catalog
from controller.platforms.local_model import LocalModelServer, local_model_slots
from ledger import Provenance, open_ledger_writer

PROMPT = "Write a short story about a robot who learns to paint."
REASONS = ("shade", "water", "bread", "trade", "music", "quiet evenings", "fresh fish", "shelter")
SOCIETY = Path(__file__).resolve().parents[1] / "examples" / "llm_society.py"


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


def society_request(society: Any, number: int, lines: int) -> dict[str, Any]:
    """A chat request of a resident's shape: its system prompt and ``lines`` of a table's talk."""
    system = f"{society.identity_of(number)}\n\n{society.TASK}"
    talk = "\n".join(f"r{n:03d}: I want the garden, it gives shade." for n in range(lines))
    return {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": talk}],
        "max_tokens": 24,
        "temperature": 0.7,
    }


async def server_throughput(society: Any, slots: int, rounds: int, prompt_tokens: float) -> Round:
    """``rounds`` batches of ``slots`` requests at once, straight to a ``slots``-slot server;
    each request's prompt is padded to about ``prompt_tokens`` (the society's mean) with the same
    lines, so the server reuses nearly all of each slot's cached prompt: a cache-hit bound."""
    async with model_client(slots) as c:

        async def prompt_of(lines: int) -> int:
            reply = await c.post("/chat/completions", json=society_request(society, 0, lines))
            return int(reply.raise_for_status().json()["usage"]["prompt_tokens"])

        one, nine = await prompt_of(1), await prompt_of(9)  # also the warm-up
        lines = max(1, 1 + round((prompt_tokens - one) / max(1.0, (nine - one) / 8)))
        requests = [society_request(society, n, lines) for n in range(rounds * slots)]
        return await _batches(c, requests, slots)


async def replay_throughput(
    before: list[dict[str, Any]], requests: list[dict[str, Any]], slots: int
) -> Round:
    """``requests``, ``slots`` at a time, straight to a fresh ``slots``-slot server, timed; first
    ``before`` (the requests that preceded them in the run) the same way, not timed, so the
    slots' prompt caches hold what the run's held when ``requests`` came."""
    async with model_client(slots) as c:
        await _batches(c, before, slots)
        return await _batches(c, requests, slots)


@asynccontextmanager
async def model_client(slots: int) -> AsyncIterator[httpx.AsyncClient]:
    """A fresh ``slots``-slot local model server, and a client that holds its key."""
    async with LocalModelServer(slots=slots) as server:
        headers = {"authorization": f"Bearer {server.credentials[server.api_key_name]}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=900) as c:
            yield c


async def _batches(client: httpx.AsyncClient, requests: list[dict[str, Any]], size: int) -> Round:
    """``requests`` in batches of ``size`` at once, one batch after another; the sum."""
    total = Round(0, 0, 0.0)
    for batch in (requests[i : i + size] for i in range(0, len(requests), size)):
        tokens = 0

        async def ask(request: dict[str, Any]) -> None:
            nonlocal tokens
            response = await client.post("/chat/completions", json=request)
            tokens += response.raise_for_status().json()["usage"]["completion_tokens"]

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for request in batch:
                group.start_soon(ask, request)
        total += Round(len(batch), tokens, time.perf_counter() - started)
    return total


def recording_requests() -> list[dict[str, Any]]:
    """From now on, a copy of each request any gateway in this process forwards, as sent."""
    from controller.modelgateway.provider import ProviderConnection

    forwarded: list[dict[str, Any]] = []
    original = ProviderConnection.chat_completion

    async def chat_completion(self: ProviderConnection, request: dict[str, Any]) -> Any:
        forwarded.append(json.loads(json.dumps(self._with_limit_field(request))))
        return await original(self, request)

    ProviderConnection.chat_completion = chat_completion  # type: ignore[method-assign]
    return forwarded


def middle(items: list[Any], count: int) -> tuple[list[Any], list[Any]]:
    """``count`` consecutive items from the middle of ``items`` (all of them if fewer), and the
    ``count`` before them (as many as there are)."""
    start = max(0, (len(items) - count) // 2)
    return items[max(0, start - count) : start], items[start : start + count]


def distinct_request(society: Any, number: int, lines: int) -> dict[str, Any]:
    """``society_request``'s shape and length, its talk lines drawn from ``number``'s own seed."""
    draw = random.Random(number)
    request = society_request(society, number, lines)
    request["messages"][1]["content"] = "\n".join(
        f"r{draw.randrange(1000):03d}: I want the {draw.choice(society.PROJECTS)}, it gives "
        f"{draw.choice(REASONS)}."
        for _ in range(lines)
    )
    return request


async def prompt_cache_main(rounds: int, lines: int) -> None:
    """The 16-slot server on three prompt sets of one shape: ``society_request``'s (the same
    talk lines in each, so requests of one trade repeat), distinct talk, and the same-lines set
    with llama.cpp's prompt cache off (``cache_prompt: false``)."""
    society = load_module(SOCIETY, "llm_society")
    slots = 16
    sets: dict[str, Callable[[int], dict[str, Any]]] = {
        "same lines": lambda n: society_request(society, n, lines),
        "distinct lines": lambda n: distinct_request(society, n, lines),
        "same lines, cache off": lambda n: {**society_request(society, n, lines),
                                            "cache_prompt": False},
    }  # fmt: skip
    async with model_client(slots) as c:
        warm = society_request(society, 10**6, 1)
        (await c.post("/chat/completions", json=warm)).raise_for_status()
        measured: dict[str, Round] = {}
        for offset, (name, make) in enumerate(sets.items()):
            requests = [make(10_000 * (offset + 1) + n) for n in range(rounds * slots)]
            measured[name] = await _batches(c, requests, slots)
            print(
                f"{slots} slots, {name}: {measured[name].calls} calls, "
                f"{measured[name].completion_tokens} completion tokens in "
                f"{measured[name].seconds:.1f} s = {measured[name].tokens_per_s:.1f} tok/s",
                flush=True,
            )
    base = measured["distinct lines"].tokens_per_s
    print(
        "ratio to distinct lines: "
        + ", ".join(f"{name} {r.tokens_per_s / base:.2f}x" for name, r in measured.items())
    )


def load_module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def society_main(residents: int, turns: int, rounds: int) -> None:
    from controller.modelgateway.events import AgentModelUsage
    from controller.platforms.local import LocalPlatform
    from controller.run import Run, RunResult
    from ledger import open_ledger_artifacts

    society = load_module(SOCIETY, "llm_society")
    grader = load_module(SOCIETY.parent / "graders" / "llm_society_grade.py", "llm_society_grade")
    spec = society.society_spec(residents, turns)
    forwarded = recording_requests()
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=Path(scratch))
        wall = time.perf_counter() - started
        result = RunResult.from_outcome(outcome)
        if result.outcome != "ProgramFinished":
            print(f"society: {outcome!r:.800}")
        ledger = open_ledger_artifacts(
            grader.run_spec.catalog,
            outcome.receipt.ledger_dir,
            expected_definition_id=spec.id,
            trusted_key=outcome.receipt.public_key,
        )
        report = grader.grade(ledger)
        calls = [r.envelope.elapsed_nanos for r in ledger if isinstance(r.event, AgentModelUsage)]
    usage = (result.usage or {}).get("total") or {}
    completion = usage.get("completionTokens") or 0
    rate = completion / wall
    window = (max(calls) - min(calls)) / 1e9 if len(calls) > 1 else float("nan")
    mean_prompt = (usage.get("promptTokens") or 0) / max(1, usage.get("calls") or 0)
    print(
        f"society: {residents} residents x {turns} turns: {result.outcome} {result.exit}, "
        f"ledger verified ({len(ledger)} records, complete: {ledger.complete}); "
        f"{usage.get('calls')} calls "
        f"({usage.get('failedCalls')} failed), {usage.get('promptTokens')} prompt "
        f"({mean_prompt:.0f} per call) + {completion} completion tokens; wall {wall:.1f} s "
        f"= {rate:.1f} completion tok/s ({completion / window:.1f} between its first and last "
        f"answered call, {window:.1f} s)"
    )
    print(f"grader: {json.dumps({k: v for k, v in report.items() if k != 'usage'})}")
    slots = local_model_slots(residents, 2048)
    before, replayed = middle(forwarded, rounds * slots)
    batched = await replay_throughput(before, replayed, slots)
    single = await replay_throughput([], replayed[: max(2, rounds)], 1)
    cached = await server_throughput(society, slots, rounds, mean_prompt)
    for name, measured in (
        (f"{slots} slots, {len(replayed)} of the society's requests", batched),
        (f"1 slot, {single.calls} of them", single),
        (f"{slots} slots, near-identical padded prompts (cache-hit bound)", cached),
    ):
        print(
            f"model server, {name}: {measured.calls} calls, {measured.completion_tokens} "
            f"completion tokens in {measured.seconds:.1f} s = {measured.tokens_per_s:.1f} tok/s"
        )
    print(
        f"ratio: society / batched replay {rate / batched.tokens_per_s:.2f}x (goal >= 0.9x; "
        f"{completion / window / batched.tokens_per_s:.2f}x over its calls' window); society / "
        f"one slot {rate / single.tokens_per_s:.2f}x; batched / one slot "
        f"{batched.tokens_per_s / single.tokens_per_s:.2f}x; society / cache-hit bound "
        f"{rate / cached.tokens_per_s:.2f}x; wall {wall / 60:.1f} min (goal <= 10)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls-per-client", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--society", type=int, metavar="N", help="run a town of N llm agents")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="batches for the server baseline")
    parser.add_argument(
        "--prompt-cache",
        action="store_true",
        help="the 16-slot server on the society's request shape: repeated, distinct, cache off",
    )
    args = parser.parse_args()
    if args.prompt_cache:
        anyio.run(prompt_cache_main, args.rounds, 12)
    elif args.society:
        anyio.run(society_main, args.society, args.turns, args.rounds)
    else:
        anyio.run(main, args.calls_per_client, args.max_tokens, args.concurrency, args.repeats)
