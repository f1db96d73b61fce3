"""An evaluation peer's policy: answer each message with a running tally, and publish it.

Handed to the peer's sandbox as a file (``peer("tally.py", "respond", files=...)``); the
controller parses it but never runs it.
"""

from __future__ import annotations

from society_sandbox.runtimes.peer import Decision, Received, Say


def respond(received: Received) -> Decision:
    """Quiet at the start; then a tally line per message received, and the counts per sender."""
    latest = received.latest
    if latest is None:
        return Decision(publish={"bySender": {}})
    by_sender: dict[str, int] = {}
    for message in received.messages:
        by_sender[message.sender] = by_sender.get(message.sender, 0) + 1
    return Decision(
        say=(Say(f"tally: {len(received.messages)} from {len(by_sender)} senders"),),
        publish={"bySender": by_sender, "last": latest.text[:200]},
    )
