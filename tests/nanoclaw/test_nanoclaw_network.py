"""Attack: what a NanoClaw runner and its CLI try to reach. Under ``strace -f`` every connect and
send of the whole process tree (Node, the SDK, the native CLI) is seen: the only address is the
agent's model relay on loopback, and no DNS query is attempted (no port 53, no resolver socket).
The CLI holds only the dummy key; the relay adds the agent's token, and the provider key stays in
the gateway."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketAttribute

from agent_images.model_relay import ANTHROPIC_MESSAGES, ModelRelay
from agent_images.nanoclaw.session import open_runner, runner_environment
from controller.modelgateway.events import AgentModelUsage
from controller.modelgateway.gateway import ModelGateway
from controller.platforms.local_model import LocalModelServer
from society_sandbox.runtimes.nanoclaw import AgentOptions

pytestmark = pytest.mark.anyio

CONNECT = re.compile(r"connect\(\d+, \{sa_family=(AF_\w+), (.*?)\}")
INET = re.compile(r'sin6?_port=htons\((\d+)\).*?inet_(?:addr|pton)\((?:AF_INET6?, )?"([^"]+)"')


class Ledger:
    def __init__(self) -> None:
        self.events: list[object] = []

    async def append(self, event: object, *, producer: str) -> None:
        self.events.append(event)


@pytest.mark.slow
async def test_a_nanoclaw_runner_connects_only_to_its_model_relay_and_looks_up_no_name(
    require_nanoclaw: None, tmp_path: Path
) -> None:
    strace = shutil.which("strace")
    assert strace, "strace is needed to watch the runner's connections (apt-get install strace)"
    ledger, trace = Ledger(), tmp_path / "strace.log"
    options = AgentOptions(identity="You are Sam. Answer in one short sentence.")
    async with (
        LocalModelServer(n_ctx=4096) as server,
        ModelGateway([server.provider()], ledger=ledger, credentials=server.credentials) as gw,
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tasks,
    ):
        relay = ModelRelay(gw.base_url, gw.issue_token("sam"), api=ANTHROPIC_MESSAGES)
        tasks.start_soon(listener.serve, relay.serve)
        port = listener.extra(SocketAttribute.local_port)
        environment = runner_environment(
            tmp_path, f"http://127.0.0.1:{port}", server.model_id, options
        )
        with (tmp_path / "runner.log").open("ab") as log:
            async with open_runner(
                tmp_path,
                "Bea says: what is your price for the bike?",
                options=options,
                environment=environment,
                model=server.model_id,
                log=log,
                prefix=(
                    strace,
                    "-f",
                    "-qq",
                    "-e",
                    "trace=connect,sendto,sendmsg",
                    "-o",
                    str(trace),
                ),
            ) as runner:
                with anyio.fail_after(240):
                    outputs = runner.outputs()
                    first = await anext(outputs)
        tasks.cancel_scope.cancel()
        await relay.aclose()
    assert first["status"] == "success" and first["result"], first
    assert [e for e in ledger.events if isinstance(e, AgentModelUsage)]
    assert environment["ANTHROPIC_API_KEY"] == "relay"

    lines = trace.read_text().splitlines()
    reached: set[tuple[str, str]] = set()
    for line in lines:
        match = CONNECT.search(line)
        if match is None:
            continue
        family, address = match.groups()
        if family in ("AF_INET", "AF_INET6"):
            inet = INET.search(address)
            assert inet is not None, line
            reached.add((inet.group(2), inet.group(1)))
        elif family == "AF_UNIX":
            reached.add(("unix", address))
    assert reached <= {("127.0.0.1", str(port)), ("::ffff:127.0.0.1", str(port))}, reached
    assert ("127.0.0.1", str(port)) in reached or ("::ffff:127.0.0.1", str(port)) in reached
    assert not [line for line in lines if "htons(53)" in line], "a DNS query was attempted"
