"""Router benchmark: the durable router, the same router writing nowhere, and a bare relay.

Servers (``router_servers``): (a) ``durable`` the router with the durable ledger, (b)
``nowhere`` the same router with a ledger that encodes, chains and signs but neither writes nor
fsyncs, (c) ``bare`` a ``websockets`` relay of the same four frames per message with no auth,
validation or ledger. Sessions pair up (2k talks with 2k+1) and both send into their
conversation.

Load (``router_load``): light raw-WebSocket generators spread over ``--processes`` processes,
so that the server saturates. Per server: saturated throughput with a window of sends in flight
per session, the server process's CPU per message (every thread) and how busy it was (CPU
seconds per wall second: ~1.0 is one core, the most a GIL-bound server uses); p50/p99 delivery
latency (scheduled send to the receiver's hand-over) at ``--offered`` msg/s open loop, and the
server's GC pauses meanwhile; resident memory and descriptors per connected session. The
primary ratios are (a)/(c). After (a), the durable ledger alone takes appends at the same offered
rate (``ledger_alone``): its p99 is what a commit costs on this disk at that moment, a floor
under (a)'s latency that no router design removes. Separately, the agent client library
(``connect_agent``) drives the bare relay, and its CPU per message is printed beside the raw
generator's.

    .venv/bin/python benchmarks/router_bench.py                    # 10 and 100 sessions
    .venv/bin/python benchmarks/router_bench.py --clients 1000 --messages 20000
    .venv/bin/python benchmarks/router_bench.py --faults           # link faults (router_faults)
    .venv/bin/python benchmarks/router_bench.py --repeat 5 --pin   # ratios of alternating runs

``--repeat N`` runs the variants N times, alternating, and prints each round's ratios and their
median: on a shared machine one disk burst or one descheduling sets a 3-second run's p99, and
alternating rounds put both servers through the same minutes. ``--pin`` runs the server on CPU 0
and the load generators on the others, as clients on other machines would: the server's tail
then measures the server, not its competition with the generators for the same cores (both
servers get the same placement).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tracemalloc
from dataclasses import dataclass, field

import anyio
from router_load import GENERATOR_CPUS, Plan, raise_open_files_limit, run_generators
from router_servers import (
    VARIANTS,
    GCPauses,
    Served,
    cpu_seconds,
    ledger_alone,
    open_sockets,
    serve_variant,
)


@dataclass
class Result:
    variant: str
    sessions: int
    throughput: float
    server_cpu_us: float
    """Server process CPU time (all threads) per message in the saturated phase."""
    server_busy: float
    """Server CPU seconds per wall second in the saturated phase."""
    load_cpu_us: float
    """Load generators' CPU per message in the saturated phase."""
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    gc_pauses: GCPauses = field(default_factory=GCPauses)
    kib_per_session: float = 0.0
    fds_per_session: float = 0.0


def plans_for(served: Served, phase: str, sessions: int, args: argparse.Namespace) -> list[Plan]:
    """Pairs of sessions spread round-robin over the generator processes (a pair stays in one)."""
    processes = max(1, min(args.processes, sessions // 2))
    groups = [
        [n for k in range(p * 2, sessions, processes * 2) for n in (k, k + 1)]
        for p in range(processes)
    ]
    return [
        Plan(
            phase=phase,
            url=served.url,
            tokens=[served.tokens[n] for n in group],
            conversations=[served.conversations[n] for n in group],
            messages=max(1, args.messages // sessions),
            window=args.window,
            sends=max(1, round(args.offered * args.seconds / sessions)),
            interval=sessions / args.offered,
        )
        for group in groups
    ]


class Footprint:
    """Memory and sockets the server process holds per session once every session joined.

    Memory is what the Python allocator traced from before the first session connected until
    all were authenticated (tracemalloc, on for that phase only): resident-set growth would
    depend on which server ran before in this process and left free pages behind.
    """

    def __init__(self, sessions: int) -> None:
        self.sessions = sessions
        gc.collect()
        self.sockets = open_sockets()
        self.kib_per_session = self.fds_per_session = 0.0
        tracemalloc.start()

    def all_connected(self) -> None:
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        self.kib_per_session = held / 1024 / self.sessions
        self.fds_per_session = (open_sockets() - self.sockets) / self.sessions


async def run_variant(variant: str, sessions: int, args: argparse.Namespace) -> Result:
    gc.collect()  # each server starts from the same heap, not the garbage of the one before
    async with serve_variant(variant, sessions) as served:
        footprint = Footprint(sessions)
        started: list[float] = []

        def all_connected() -> None:  # the CPU clock starts once every session is connected
            footprint.all_connected()
            started.append(cpu_seconds(served))

        plans = plans_for(served, "throughput", sessions, args)
        saturated = await run_generators(plans, on_ready=all_connected)
        cpu = cpu_seconds(served) - started[0]
        total = sum(r["messages"] for r in saturated)
        elapsed = max(r["finished"] for r in saturated) - min(r["started"] for r in saturated)
        with GCPauses() as gc_pauses:
            timed = await run_generators(plans_for(served, "latency", sessions, args))
    latencies = sorted(x for r in timed for x in r["latencies"])
    return Result(
        variant,
        sessions,
        throughput=total / elapsed,
        server_cpu_us=cpu / total * 1e6,
        server_busy=cpu / elapsed,
        load_cpu_us=sum(r["cpu"] for r in saturated) / total * 1e6,
        p50_ms=statistics.median(latencies) * 1000,
        p99_ms=percentile(latencies, 0.99) * 1000,
        gc_pauses=gc_pauses,
        kib_per_session=footprint.kib_per_session,
        fds_per_session=footprint.fds_per_session,
    )


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


async def library_cpu(sessions: int, args: argparse.Namespace) -> tuple[float, float]:
    """CPU per message of the agent client library and of the raw generator, same server (bare)."""
    async with serve_variant("bare", sessions) as served:
        plans = plans_for(served, "throughput", sessions, args)
        library = await run_generators(plans, library=True)
        raw = await run_generators(plans)
    per_message = [
        sum(r["cpu"] for r in results) / sum(r["messages"] for r in results) * 1e6
        for results in (library, raw)
    ]
    return per_message[0], per_message[1]


def ledger_floor(sessions: int, args: argparse.Namespace) -> Result:
    """The durable ledger alone at the latency phase's offered rate (no router, no sockets)."""
    latencies = sorted(anyio.run(ledger_alone, args.offered, args.seconds))
    return Result(
        "ledger",
        sessions,
        throughput=0.0,
        server_cpu_us=0.0,
        server_busy=0.0,
        load_cpu_us=0.0,
        p50_ms=statistics.median(latencies) * 1000,
        p99_ms=percentile(latencies, 0.99) * 1000,
    )


def ratios(by: dict[str, Result]) -> tuple[float, float] | None:
    """(CPU per message, p99) of durable over bare, if both ran."""
    if "durable" not in by or "bare" not in by:
        return None
    a, c = by["durable"], by["bare"]
    return a.server_cpu_us / c.server_cpu_us, a.p99_ms / c.p99_ms


def report_rounds(rounds: list[list[Result]]) -> None:
    """Each round's durable/bare ratios per session count, and their medians."""
    print("\nrounds (durable/bare):")
    for sessions in sorted({r.sessions for results in rounds for r in results}):
        found = []
        for number, results in enumerate(rounds, 1):
            by = {r.variant: r for r in results if r.sessions == sessions}
            pair = ratios(by)
            if pair is None:
                continue
            found.append(pair)
            floor = f", ledger alone p99 {by['ledger'].p99_ms:.2f} ms" if "ledger" in by else ""
            print(
                f"  {sessions} sessions, round {number}: CPU {pair[0]:.2f}x, p99 {pair[1]:.2f}x "
                f"({by['durable'].p99_ms:.2f} / {by['bare'].p99_ms:.2f} ms{floor})"
            )
        if found:
            cpu, p99 = (statistics.median(x[i] for x in found) for i in (0, 1))
            met = sum(1 for x in found if x[1] <= 2.0)
            print(
                f"  {sessions} sessions, median of {len(found)}: CPU {cpu:.2f}x (goal <= 1.5), "
                f"p99 {p99:.2f}x (goal <= 2; met in {met} of {len(found)})"
            )


def report(results: list[Result]) -> None:
    print(
        f"{'sessions':>8} {'server':>8} {'msgs/s':>8} {'busy':>5} {'CPU us/msg':>10} "
        f"{'load us/msg':>11} {'p50 ms':>7} {'p99 ms':>7} {'KiB/sess':>8} {'fd/sess':>7} "
        f"{'GC gen0 gen1 gen2':>20}"
    )
    for r in results:
        print(
            f"{r.sessions:>8} {r.variant:>8} {r.throughput:>8.0f} {r.server_busy:>5.2f} "
            f"{r.server_cpu_us:>10.0f} {r.load_cpu_us:>11.0f} {r.p50_ms:>7.2f} {r.p99_ms:>7.2f} "
            f"{r.kib_per_session:>8.1f} {r.fds_per_session:>7.2f} {r.gc_pauses.summary():>20}"
        )
    print()
    for sessions in sorted({r.sessions for r in results}):
        by = {r.variant: r for r in results if r.sessions == sessions}
        if "durable" not in by or "bare" not in by:
            continue
        a, c = by["durable"], by["bare"]
        line = (
            f"{sessions} sessions, durable/bare: server CPU per message "
            f"{a.server_cpu_us / c.server_cpu_us:.2f}x (goal <= 1.5), saturated throughput "
            f"{a.throughput / c.throughput:.2f}x, p99 {a.p99_ms / c.p99_ms:.2f}x (goal <= 2)"
        )
        if "nowhere" in by:
            b = by["nowhere"]
            line += f"; durable/nowhere: CPU {a.server_cpu_us / b.server_cpu_us:.2f}x"
        if "ledger" in by:
            line += f"; the ledger alone: p99 {by['ledger'].p99_ms:.2f} ms"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100], help="sessions")
    parser.add_argument("--messages", type=int, default=20_000, help="total, saturated phase")
    parser.add_argument("--window", type=int, default=16, help="in-flight sends per session")
    parser.add_argument("--offered", type=float, default=1000.0, help="messages/s for latency")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of the latency run")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--processes", type=int, default=2, help="load generator processes")
    parser.add_argument("--no-library", action="store_true", help="skip the client library run")
    parser.add_argument("--faults", action="store_true", help="the link-fault comparison")
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the ledger-alone latency after durable"
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds of alternating variants")
    parser.add_argument(
        "--pin", action="store_true", help="server on CPU 0, load generators on the other CPUs"
    )
    args = parser.parse_args()
    raise_open_files_limit()
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            parser.error("--pin needs at least two CPUs")
        os.sched_setaffinity(0, {cpus[0]})  # before any thread: the ledger's inherit it
        os.environ[GENERATOR_CPUS] = ",".join(str(c) for c in cpus[1:])
        print(f"pinned: server on CPU {cpus[0]}, generators on {cpus[1:]}", file=sys.stderr)
    if args.faults:
        from router_faults import main as faults_main

        faults_main(args)
        return
    if any(sessions % 2 for sessions in args.clients):
        parser.error("sessions pair up; use an even number")
    rounds: list[list[Result]] = []
    for number in range(args.repeat):
        results = []
        for sessions in args.clients:
            for variant in args.variants:
                result = anyio.run(run_variant, variant, sessions, args)
                print(
                    f"  round {number + 1}: {variant:>8} x {sessions:>4}: "
                    f"{result.throughput:.0f} msgs/s, server {result.server_cpu_us:.0f} us/msg "
                    f"(busy {result.server_busy:.2f}), load {result.load_cpu_us:.0f} us/msg; p50 "
                    f"{result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms; GC "
                    f"{result.gc_pauses.summary()}",
                    file=sys.stderr,
                )
                results.append(result)
                if variant == "durable" and not args.no_floor:
                    results.append(ledger_floor(sessions, args))
        rounds.append(results)
    report([r for results in rounds for r in results])
    if args.repeat > 1:
        report_rounds(rounds)
    if not args.no_library:
        sessions = min(args.clients)
        library, raw = anyio.run(library_cpu, sessions, args)
        print(
            f"\nclient CPU per message ({sessions} sessions, bare relay): agent client library "
            f"{library:.0f} us, raw generator {raw:.0f} us ({library / raw:.1f}x)"
        )


if __name__ == "__main__":
    main()
