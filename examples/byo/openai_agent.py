"""An agent written against the stock ``openai`` SDK, run unmodified by ``byo(...)``.

``OpenAI()`` reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` from its sandbox: the launcher's
loopback relay to the run's model gateway and the agent's own gateway token. It answers each
message that mentions it, in that message's conversation, through its own router session.
"""

import os

import anyio
from openai import OpenAI

from society_sandbox.network.client import connect_sandbox_agent

ME = os.environ["SOCIETY_AGENT_NAME"]
client = OpenAI()


def answer(text: str) -> str:
    completion = client.chat.completions.create(
        model="gpt-4o-mini",  # the relay asks for the model the agent was granted
        messages=[
            {"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": text},
        ],
        max_tokens=48,
    )
    said = (completion.choices[0].message.content or "").replace("@", "").strip()
    return said or "(no answer)"


async def main() -> None:
    async with connect_sandbox_agent() as session:
        async for delivery in session.deliveries():
            if f"@{ME}" in delivery.text:
                question = delivery.text.replace(f"@{ME}", "").strip()
                reply = await anyio.to_thread.run_sync(answer, question)
                await session.send(delivery.conversation_id, reply)


anyio.run(main)
