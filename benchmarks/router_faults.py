"""``router_bench.py --faults``: the durable router with link policies active, and without.

Sessions pair up (2k with 2k+1, each pair one conversation, both sending) at ``--offered``
msg/s open loop for ``--seconds``. With faults, for the whole run:

  * every directed link drops 10% of its deliveries (a deterministic hash of message and
    receiver, so a held delivery's re-evaluation decides the same);
  * half the links (those from even sessions) delay every delivery by 50 ms;
  * the links of half the roster (pairs 0 .. P/2-1, both ways) are down from 1/3 to 2/3 of
    the run: a partition that heals mid-run;
  * links from odd sessions of even pairs hold their deliveries; the holds clear every second
    and are set again at once.

Then the evidence is checked against the policies: every delivery a policy dropped has a
``LinkMessageDropped`` record and never reached its receiver; every delayed or held one has its
``LinkMessageDelayed`` / ``LinkMessageHeld`` record, was delivered afterwards (its
``RouterMessagesDelivered`` follows the record), and a delayed one no sooner than its delay.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
from router_load import Plan, run_generators
from router_servers import Served, router_server

from controller.events.network import (
    LinkMessageDelayed,
    LinkMessageDropped,
    LinkMessageHeld,
    RouterMessageCommitted,
    RouterMessagesDelivered,
)
from controller.network.links import Deliver, Drop, LinkDelivery, Verdict
from controller.network.router import Router

DROP_SHARE = 0.10
DELAY_SECONDS = 0.05
HOLD_PERIOD = 1.0


def dropped_by_policy(message_id: str, receiver_id: str) -> bool:
    """The 10% drop decision: a hash of message and receiver, the same on every evaluation."""
    return hashlib.blake2b(f"{message_id}>{receiver_id}".encode()).digest()[0] < 256 * DROP_SHARE


def ten_percent_drop(delivery: LinkDelivery) -> Verdict:
    if dropped_by_policy(delivery.message.message_id, delivery.receiver.id):
        return Drop("bench-drop")
    return Deliver()


@dataclass
class FaultRun:
    label: str
    sessions: int
    committed: int
    delivered: int
    seconds: float
    p50_ms: float
    p99_ms: float
    unshaped_p50_ms: float
    """Deliveries that were neither delayed nor held: what faults elsewhere cost them."""
    unshaped_p99_ms: float
    records: dict[str, int]
    violations: list[str]


async def run(sessions: int, args: argparse.Namespace, faults: bool) -> FaultRun:
    async with router_server(sessions) as served:
        assert served.router is not None and served.ledger is not None
        plans = [
            Plan(
                phase="latency",
                url=served.url,
                tokens=served.tokens,
                conversations=served.conversations,
                messages=0,
                window=0,
                sends=max(1, round(args.offered * args.seconds / sessions)),
                interval=sessions / args.offered,
                drain=HOLD_PERIOD * 1.5,
            )
        ]
        go = anyio.Event()
        async with anyio.create_task_group() as tasks, AsyncExitStack() as policies:
            if faults:
                await install(served.router, sessions, policies)
                tasks.start_soon(partition, served.router, sessions, args.seconds, go)
                tasks.start_soon(holds, served.router, sessions)
            (result,) = await run_generators(plans, on_ready=go.set)
            tasks.cancel_scope.cancel()
        await served.router.fabric.settle()
        evidence = await read_evidence(served)
    names = [f"agent:agent-{n}" for n in range(sessions)]
    delivered = {(m, names[i]): latency for i, m, latency in result["delivered"]}
    latencies = sorted(delivered.values())
    shaped = evidence["delayed"].keys() | evidence["held"].keys()
    unshaped = sorted(v for k, v in delivered.items() if k not in shaped)
    return FaultRun(
        "faults" if faults else "fault-free",
        sessions,
        committed=evidence["committed"],
        delivered=len(delivered),
        seconds=args.seconds,
        p50_ms=statistics.median(latencies) * 1000,
        p99_ms=percentile(latencies, 0.99) * 1000,
        unshaped_p50_ms=statistics.median(unshaped) * 1000,
        unshaped_p99_ms=percentile(unshaped, 0.99) * 1000,
        records={k: len(v) for k, v in evidence.items() if isinstance(v, dict)},
        violations=check(evidence, delivered, result["errors"], faults),
    )


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def links(sessions: int) -> list[tuple[str, str]]:
    return [(f"agent-{n}", f"agent-{n ^ 1}") for n in range(sessions)]


async def install(router: Router, sessions: int, stack: AsyncExitStack) -> None:
    for sender, receiver in links(sessions):
        await stack.enter_async_context(
            router.links.shape(sender, receiver, ten_percent_drop, "drop 10%")
        )
        if int(sender.split("-")[1]) % 2 == 0:
            await stack.enter_async_context(router.links.delay(sender, receiver, DELAY_SECONDS))


async def partition(router: Router, sessions: int, seconds: float, go: anyio.Event) -> None:
    await go.wait()  # the sessions start sending now
    await anyio.sleep(seconds / 3)
    cut = [(s, r) for s, r in links(sessions) if int(s.split("-")[1]) < sessions // 2]
    async with AsyncExitStack() as stack:
        for sender, receiver in cut:
            await stack.enter_async_context(router.links.disable(sender, receiver))
        await anyio.sleep(seconds / 3)


async def holds(router: Router, sessions: int) -> None:
    held = [(s, r) for s, r in links(sessions) if int(s.split("-")[1]) % 4 == 1]
    while True:
        async with AsyncExitStack() as stack:
            for sender, receiver in held:
                await stack.enter_async_context(router.links.hold(sender, receiver))
            await anyio.sleep(HOLD_PERIOD)


async def read_evidence(served: Served) -> dict[str, Any]:
    assert served.ledger is not None
    ledger = served.ledger
    total = ledger.record_count
    found: dict[str, Any] = {"committed": 0, "receivers": []}
    kinds = {
        LinkMessageDropped: "dropped",
        LinkMessageDelayed: "delayed",
        LinkMessageHeld: "held",
    }
    found["recorded-delivered"] = {}
    for name in kinds.values():
        found[name] = {}
    async for record in ledger.records():
        event = record.event
        if isinstance(event, RouterMessageCommitted):
            found["committed"] += 1
            peer = int(event.sender_id.rsplit("-", 1)[1]) ^ 1
            found["receivers"].append((event.message_id, f"agent:agent-{peer}"))
        elif isinstance(event, RouterMessagesDelivered):
            for message_id in event.message_ids:
                key = (message_id, event.receiver_id)
                found["recorded-delivered"].setdefault(key, []).append((record.sequence, None))
        elif type(event) in kinds:
            key = (event.message_id, event.receiver_id)  # type: ignore[attr-defined]
            found[kinds[type(event)]].setdefault(key, []).append(
                (record.sequence, getattr(event, "reason", None))
            )
        if record.sequence >= total - 1:
            break
    return found


def check(
    evidence: dict[str, Any],
    delivered: dict[tuple[str, str], float],
    errors: Any,
    faulty: bool,
) -> list[str]:
    """Each violation of the policies' evidence, as a sentence (none expected)."""
    problems = [f"the generator saw errors: {errors[:3]}"] if errors else []
    dropped, recorded = evidence["dropped"], evidence["recorded-delivered"]
    for key, entries in dropped.items():
        if len(entries) != 1:
            problems.append(f"{key} dropped {len(entries)} times")
        if key in delivered or key in recorded:
            problems.append(f"{key} was dropped ({entries[0][1]}) and delivered")
    for key, entries in recorded.items():
        if len(entries) != 1:
            problems.append(f"{key} has {len(entries)} delivery records")
        if key not in delivered:
            problems.append(f"{key} recorded delivered but no receiver got it")
    for key in delivered:
        if key not in recorded:
            problems.append(f"{key} reached its receiver without a delivery record")
    for key in evidence["receivers"]:  # each (message, receiver): delivered or dropped, once
        if (key in delivered) == (key in dropped):
            problems.append(
                f"{key} was {'both' if key in delivered else 'neither'} delivered "
                f"{'and' if key in delivered else 'nor'} dropped"
            )
        if faulty and dropped_by_policy(*key):
            reasons = [reason for _, reason in dropped.get(key, [])]
            if reasons != ["bench-drop"]:
                problems.append(f"the policy dropped {key}; its records say {reasons}")
    for kind in ("delayed", "held"):
        for key, entries in evidence[kind].items():
            if key not in delivered and key not in dropped:
                problems.append(f"{key} was {kind} and neither delivered nor dropped")
            if key in recorded and recorded[key][0][0] < entries[0][0]:
                problems.append(f"{key} was delivered before its {kind} record")
            if kind == "delayed" and key in delivered and delivered[key] < DELAY_SECONDS:
                problems.append(f"{key} was delayed {DELAY_SECONDS}s but took {delivered[key]}s")
    return problems[:20]


def main(args: argparse.Namespace) -> None:
    sessions = min(args.clients)
    rows = [anyio.run(run, sessions, args, faults) for faults in (False, True)]
    print(
        f"{sessions} sessions, {args.offered:.0f} msg/s offered for {args.seconds:g} s; rates "
        f"over the sending period; records in the ledger; violations of the policies' evidence"
    )
    print(
        f"{'router':>10} {'committed/s':>11} {'delivered/s':>11} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'unshaped p50/p99':>16} "
        f"{'dropped':>7} {'delayed':>7} {'held':>5} {'delivered':>9}  violations"
    )
    for r in rows:
        recs = r.records
        print(
            f"{r.label:>10} {r.committed / r.seconds:>11.0f} "
            f"{r.delivered / r.seconds:>11.0f} {r.p50_ms:>7.2f} {r.p99_ms:>7.2f} "
            f"{r.unshaped_p50_ms:>7.2f}/{r.unshaped_p99_ms:<8.2f} "
            f"{recs['dropped']:>7} {recs['delayed']:>7} {recs['held']:>5} "
            f"{recs['recorded-delivered']:>9}  {len(r.violations)}"
        )
        for violation in r.violations:
            print(f"    {violation}")
    plain, faulty = rows
    print(
        f"\nwith faults/fault-free: committed/s {faulty.committed / plain.committed:.2f}x "
        f"(same offered load), p50 {faulty.p50_ms / plain.p50_ms:.2f}x, "
        f"p99 {faulty.p99_ms / plain.p99_ms:.2f}x; unshaped deliveries p99 "
        f"{faulty.unshaped_p99_ms / plain.unshaped_p99_ms:.2f}x"
    )
