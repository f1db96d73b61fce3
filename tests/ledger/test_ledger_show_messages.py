"""``society ledger show --messages`` and its filters, on a real run's ledger: every message in
full per conversation with its fate on each link, narrowed by agent, conversation and tag, as
text or JSON lines, with the agents' text escaped for the terminal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from real_runs import society_run
from test_ledger_cli import society

from controller.cli import main
from controller.viewer.selection import SelectionError
from ledger import SigningKey

SPEC_MODULE = '''
"""mallory answers with terminal escape sequences, bob at length, carol briefly; during round 2
the link mallory -> bob is down and carol -> bob delayed; round 3 is a second conversation."""

import anyio

from controller import ReplyDelay, Rule, RunSpec, ScriptedPolicy, scripted

HOSTILE = "\\x1b]0;owned\\x07\\x1b[2J\\u202eevil {text}"
LONG = "{me} heard {text}: " + " ".join(f"word{n}" for n in range(60)) + " THE-END"


def answering(text):
    rule = Rule(match=r"^round \\d+$", senders=("desk",), texts=(text,))
    return ScriptedPolicy(rules=(rule,), delay=ReplyDelay(min_ms=0, max_ms=5))


async def execute(ctx):
    mallory, bob, carol = (ctx.agents[name].agent for name in ("mallory", "bob", "carol"))
    links = ctx.network.links
    async with ctx.network.endpoint("desk") as desk:
        replies = desk.messages()

        async def play(conversation, number, expected):
            await conversation.send(f"round {number}")
            pending = set(expected)
            with anyio.fail_after(30):
                async for message in replies:
                    if f"round {number}" in message.text:
                        pending.discard(message.sender.name)
                        if not pending:
                            return

        everyone = await desk.open(mallory, bob, carol)
        await play(everyone, 1, {"mallory", "bob", "carol"})
        async with links.disable(mallory, bob), links.delay(carol, bob, 0.05):
            await play(everyone, 2, {"mallory", "bob", "carol"})
            await anyio.sleep(0.3)  # the answers to bob reach their links before they change
        alone = await desk.open(bob)
        await play(alone, 3, {"bob"})
    return {"rounds": 3}


run_spec = RunSpec.define(
    id="acme.transcripts/v1",
    agents={
        "mallory": scripted(answering(HOSTILE)),
        "bob": scripted(answering(LONG)),
        "carol": scripted(answering("{me} heard {text}")),
    },
    execute=execute,
)
'''
LONG_TAIL = "word58 word59 THE-END"
HOSTILE_SHOWN = "\\x1b]0;owned\\x07\\x1b[2J\\u202eevil round 2"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run of SPEC_MODULE through ``society run``, done once for the module."""
    folder = tmp_path_factory.mktemp("show-messages")
    (folder / "spec.py").write_text(SPEC_MODULE)
    key = folder / "operator.pem"
    key.write_bytes(SigningKey.generate().private_pem())
    line = society_run(folder / "artifacts", key, folder / "spec.py")
    return folder / "artifacts" / line["runId"]


def _show(capsys: Any, *argv: str | Path) -> tuple[int, str]:
    code = society("ledger", "show", *(str(arg) for arg in argv), "--color", "never")
    return code, capsys.readouterr().out


def _messages(out: str) -> dict[str, str]:
    """Each message's block of ``--messages`` text, by message id."""
    blocks: dict[str, str] = {}
    for block in out.split("\n\n"):
        head = block.strip().split("\n", 1)[0].split()
        if len(head) >= 4 and head[0].startswith("+") and head[1].startswith("#"):
            blocks[head[2]] = block
    return blocks


def _json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def test_messages_show_every_text_in_full_grouped_per_conversation(
    run_dir: Path, capsys: Any
) -> None:
    code, out = _show(capsys, run_dir, "--messages")
    assert code == 0 and "verified, complete" in out
    assert out.count("conversation c-1 · opened by endpoint:desk") == 1
    assert "participants endpoint:desk, agent:mallory, agent:bob, agent:carol" in out
    assert (
        "conversation c-2 · opened by endpoint:desk · participants endpoint:desk, agent:bob" in out
    )
    longs = [line for line in out.splitlines() if "bob heard round" in line]
    assert len(longs) == 3 and all(line.endswith(LONG_TAIL) for line in longs), longs
    _, timeline = _show(capsys, run_dir)
    assert "bob heard round 1" in timeline and LONG_TAIL not in timeline, "the timeline cuts it"
    counts = out.rstrip().splitlines()[-1].split(" · ")
    assert counts[0] == "10 messages in 2 conversations"
    assert {"delayed 1", "dropped 1", "taken 7"} <= set(counts)


def test_a_dropped_message_names_its_receiver_and_the_reason_and_a_delay_its_seconds(
    run_dir: Path, capsys: Any
) -> None:
    _, out = _show(capsys, run_dir, "--messages")
    blocks = _messages(out)
    dropped = next(block for block in blocks.values() if HOSTILE_SHOWN in block)
    assert "agent:mallory" in dropped.split("\n")[0]
    (drop,) = [line.split() for line in dropped.splitlines() if "dropped" in line]
    assert drop[:2] == ["dropped", "agent:bob"] and drop[-1] == "link-down"
    delivered = next(line for line in dropped.splitlines() if line.strip().startswith("delivered"))
    assert "endpoint:desk" in delivered and "agent:bob" not in delivered
    delayed = next(block for block in blocks.values() if "carol heard round 2" in block)
    assert "delayed    agent:bob" in delayed and "by 0.05 s" in delayed
    assert "agent:bob" in next(line for line in delayed.splitlines() if "delivered" in line)


def test_agent_text_with_escape_sequences_is_shown_escaped(run_dir: Path, capsys: Any) -> None:
    for argv in (["--messages"], ["--messages", "--json"], [], ["--json"]):
        code, out = _show(capsys, run_dir, *argv)
        assert code == 0
        assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out, argv
    _, out = _show(capsys, run_dir, "--messages")
    assert HOSTILE_SHOWN in out
    _, out = _show(capsys, run_dir, "--messages", "--json")
    assert "\\u001b]0;owned\\u0007" in out
    texts = [line["text"] for line in _json_lines(out)]
    assert "\x1b]0;owned\x07\x1b[2J\u202eevil round 2" in texts, "the JSON still holds the text"


def test_filters_narrow_the_messages_and_the_timeline(run_dir: Path, capsys: Any) -> None:
    _, out = _show(capsys, run_dir, "--messages", "--conversation", "c-2")
    assert "conversation c-2" in out and "conversation c-1" not in out
    assert sorted(_messages(out)) == ["m-10", "m-9"]

    _, out = _show(capsys, run_dir, "--messages", "--agent", "carol")
    assert "conversation c-2" not in out
    assert {"m-1", "m-4", "m-5", "m-8"} <= set(_messages(out)) <= {f"m-{n}" for n in range(1, 9)}

    _, out = _show(capsys, run_dir, "--messages", "--tag", "link-message-dropped")
    (only,) = _messages(out).values()
    assert HOSTILE_SHOWN in only

    argv = ["--messages", "--agent", "mallory", "--agent", "carol", "--tag", "link-*"]
    _, out = _show(capsys, run_dir, *argv)
    assert len(_messages(out)) == 2, "the dropped one and the delayed one"

    _, out = _show(capsys, run_dir, "--tag", "link-*")
    tags = {line.split()[3] for line in out.splitlines() if line.lstrip().startswith("+")}
    assert tags == {
        "society.link-down/v1",
        "society.link-up/v1",
        "society.link-policy-set/v1",
        "society.link-policy-cleared/v1",
        "society.link-message-dropped/v1",
        "society.link-message-delayed/v1",
    }
    assert "shown: " in out

    _, out = _show(capsys, run_dir, "--json", "--agent", "agent:carol")
    records = _json_lines(out)
    named = [
        row
        for row in records
        if "agent:carol" in json.dumps(row["event"]) or row["event"].get("agent") == "carol"
    ]
    assert records and named == records

    _, out = _show(capsys, run_dir, "--json", "--conversation", "c-2", "--tag", "*delivered*")
    records = _json_lines(out)
    assert {row["event"]["tag"] for row in records} == {"society.router-messages-delivered/v1"}
    assert {i for row in records for i in row["event"]["messageIds"]} >= {"m-9", "m-10"}


def test_json_lines_parse_and_stdout_carries_nothing_else(run_dir: Path, capsys: Any) -> None:
    code = society("ledger", "show", str(run_dir), "--messages", "--json")
    captured = capsys.readouterr()
    assert code == 0
    messages = _json_lines(captured.out)
    assert [m["messageId"] for m in messages] == [f"m-{n}" for n in range(1, 11)]
    dropped = next(m for m in messages if "owned" in m["text"] and "round 2" in m["text"])
    assert dropped["sender"] == "agent:mallory" and dropped["conversationId"] == "c-1"
    (drop,) = [fate for fate in dropped["fates"] if fate["kind"] == "dropped"]
    assert (drop["receiver"], drop["reason"]) == ("agent:bob", "link-down")
    assert dropped["unreached"] == [] and dropped["parts"] == [dropped["text"]]
    verification = json.loads(captured.err)
    assert verification["valid"] is True and verification["artifacts"]["changed"] == 0

    society("ledger", "show", str(run_dir), "--json")
    records = _json_lines(capsys.readouterr().out)
    assert [row["logicalSequence"] for row in records] == list(range(len(records)))


def test_an_unknown_agent_is_refused_with_a_typed_error_naming_the_agents(
    run_dir: Path, capsys: Any
) -> None:
    with pytest.raises(SelectionError) as raised:
        society("ledger", "show", str(run_dir), "--agent", "malory")
    assert raised.value.reason == "unknown-agent"
    assert 'did you mean "mallory"' in raised.value.detail
    assert main(["ledger", "show", str(run_dir), "--messages", "--agent", "malory"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        'society ledger show: error: no agent "malory" in this ledger (did you mean "mallory"?); '
        "agents in it: bob, carol, desk, mallory\n"
    )


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [("--conversation", "c-3", "unknown-conversation"), ("--tag", "link-mesage-*", "unknown-tag")],
)
def test_an_unknown_conversation_or_tag_is_refused(
    run_dir: Path, option: str, value: str, reason: str
) -> None:
    with pytest.raises(SelectionError) as raised:
        society("ledger", "show", str(run_dir), option, value)
    assert raised.value.reason == reason


def test_a_tag_the_catalog_declares_but_no_record_carries_shows_nothing(
    run_dir: Path, capsys: Any
) -> None:
    code, out = _show(capsys, run_dir, "--messages", "--tag", "link-message-held")
    assert code == 0 and "0 messages in 0 conversations" in out


def test_messages_of_a_ledger_that_does_not_verify_are_shown_as_found(
    run_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    records = copy / "ledger" / "main" / "records.ndjson"
    records.write_text(records.read_text().replace("carol heard round 1", "carol heard round 9"))
    code, out = _show(capsys, copy, "--messages", "--agent", "carol")
    assert code == 1 and "DOES NOT VERIFY (chain-broken)" in out
    assert "carol heard round 9" in out and "conversation c-1" in out
