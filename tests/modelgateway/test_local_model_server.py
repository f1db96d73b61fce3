"""The real local model (llama.cpp serving SmolLM2-135M) answering agents through the gateway.

Runs wherever xllamacpp is installed (scripts/install-llm.sh). Under CI (env CI set) a missing
install fails instead of skipping, so the real-model path cannot silently drop out of CI.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import httpx
import pytest

from controller.modelgateway import AgentModelUsage, ModelGateway, model_gateway_catalog
from controller.modelgateway.pricing import SMOLLM2_MODEL_ID
from controller.platforms import local_model as local_model_module
from controller.platforms.local_model import LocalModelError, LocalModelServer, locate_smollm2_gguf
from ledger import Provenance, open_ledger_writer

pytestmark = pytest.mark.anyio

LLAMA_CPP_INSTALLED = importlib.util.find_spec("xllamacpp") is not None


@pytest.fixture
def require_llama_cpp() -> None:
    if LLAMA_CPP_INSTALLED:
        return
    message = "xllamacpp is not installed; run scripts/install-llm.sh"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must run the real-model test)")
    pytest.skip(message)


@pytest.mark.slow
async def test_the_real_local_model_answers_an_agent_through_the_gateway_and_usage_is_recorded(
    require_llama_cpp: None, tmp_path: Path
) -> None:
    async with (
        open_ledger_writer(
            tmp_path / "ledger",
            catalog=model_gateway_catalog,
            definition_id="tests.modelgateway",
            run_id="sr-" + "0" * 32,
            provenance=Provenance.current("local"),
        ) as writer,
        LocalModelServer(n_ctx=1024) as server,
    ):
        async with ModelGateway(
            [server.provider()], ledger=writer, credentials=server.credentials
        ) as gateway:
            token = gateway.issue_token("alice")
            async with httpx.AsyncClient(
                base_url=gateway.base_url,
                headers={"authorization": f"Bearer {token}"},
                timeout=120,
            ) as agent:
                response = await agent.post(
                    "/chat/completions",
                    json={
                        "model": SMOLLM2_MODEL_ID,
                        "messages": [{"role": "user", "content": "Say hello in one word."}],
                        "max_tokens": 8,
                        "temperature": 0,
                    },
                )
            summary = gateway.usage_summary()
        async with httpx.AsyncClient() as outsider:  # without the server's key: refused
            bypass = await outsider.get(f"{server.base_url}/models")
        pid = server.pid
        await writer.complete()
        recorded = [event async for event in writer.events(AgentModelUsage)]

    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["choices"][0]["message"]["content"].strip()
    assert reply["usage"]["completion_tokens"] >= 1
    [event] = recorded
    assert event.agent == "alice" and event.model == SMOLLM2_MODEL_ID
    assert event.prompt_tokens == reply["usage"]["prompt_tokens"] > 0
    assert event.completion_tokens == reply["usage"]["completion_tokens"]
    assert event.cost_usd == 0.0  # local model: free, and known to be free
    assert summary.agents["alice"].completion_tokens == event.completion_tokens
    assert bypass.status_code == 401
    assert not _alive(pid), "the model server outlived its scope"
    ledger_bytes = b"".join(p.read_bytes() for p in (tmp_path / "ledger").iterdir())
    assert server.credentials["SOCIETY_LOCAL_MODEL_KEY"].encode() not in ledger_bytes
    assert token.encode() not in ledger_bytes


async def test_the_model_file_is_found_in_the_installed_package(require_llama_cpp: None) -> None:
    path = locate_smollm2_gguf()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000


async def test_a_missing_llama_cpp_says_to_run_the_installer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(local_model_module, "_SERVER_MODULES", ("society_no_such_llama_cpp",))
    with pytest.raises(LocalModelError) as raised:
        async with LocalModelServer(model_path=tmp_path / "model.gguf"):
            pass
    assert raised.value.reason == "llama-cpp-missing"
    assert "scripts/install-llm.sh" in str(raised.value)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
