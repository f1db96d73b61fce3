"""A hostile RunSpec module, in the controller's process, hunts for the ledger's signing key.

The operator key is made in another process: this one (the controller's, the module's) never
reads it, so any copy of its bytes the module finds here came from the run. The module gets only
a masked needle to recognise the bytes with (``hostile_module.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from controller.platforms.local import LocalPlatform
from controller.run import Run, RunRequest, execute_run, load_run_spec
from controller.run.runid import new_run_id
from ledger import LedgerError, open_ledger_artifacts

pytestmark = pytest.mark.anyio

MODULE = Path(__file__).with_name("hostile_module.py")
MAKE_KEY = """
import os, sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from ledger.signing import encode_public_key
key = Ed25519PrivateKey.generate()
pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                        serialization.NoEncryption())
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, pem)
raw, mask = key.private_bytes_raw(), os.urandom(32)
print(mask.hex() + ":" + bytes(a ^ b for a, b in zip(mask, raw)).hex())
print(encode_public_key(key.public_key()))
"""


@pytest.fixture
def operator_key(tmp_path: Path) -> tuple[Path, str, str]:
    """An operator key file, the module's needle for its raw bytes, and its public key."""
    path = tmp_path / "operator.pem"
    made = subprocess.run(
        [sys.executable, "-c", MAKE_KEY, str(path)], capture_output=True, text=True, check=True
    )
    needle, public = made.stdout.split()
    return path, needle, public


async def test_a_hostile_module_finds_no_key_in_its_process_and_no_signer_that_forges_for_it(
    artifact_root: Path, operator_key: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file, needle, public = operator_key
    monkeypatch.setenv("SOCIETY_SIGNING_KEY", str(key_file))
    monkeypatch.setenv("HOSTILE_NEEDLE", needle)
    spec = load_run_spec(MODULE)
    request = RunRequest.build(
        module_path=str(MODULE), run_id=new_run_id(), artifact_root=str(artifact_root)
    )
    result = await execute_run(request, LocalPlatform(), spec=spec)
    assert result.outcome == "ProgramFinished" and result.exit == "success", result
    ledger = open_ledger_artifacts(spec.catalog, result.ledger_dir, trusted_key=public)
    assert ledger.signature == "pinned" and ledger.unsigned_records == 0
    (hunt,) = [record.event for record in ledger if record.tag == "hostile.key-hunt/v1"]
    assert hunt.signer_found, "the key lives in a signer process of the controller's"
    assert hunt.key_objects == [], "no key object is reachable from the module's process"
    assert hunt.environment_hits == 0
    assert hunt.own_memory_hits == 0, "no copy of the key's bytes is in the module's process"
    assert hunt.children_memory_hits == 0, "nor in any other readable child of the controller"
    assert hunt.forged == {
        "other-run": "refused: signature-refused",
        "other-completion": "refused: signature-refused",
        "not-a-statement": "refused: signature-refused",
    }


async def test_an_unreadable_operator_key_is_the_runs_one_typed_error_before_anything_starts(
    artifact_root: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "operator.pem"
    bad.write_text("not a key\n")
    spec = load_run_spec(MODULE)
    with pytest.raises(LedgerError) as refused:
        await Run.execute(
            spec, platform=LocalPlatform(), artifact_root=artifact_root, signing_key_file=bad
        )
    assert refused.value.reason == "signing-key-unreadable" and str(bad) in str(refused.value)
    assert [entry async for entry in anyio.Path(artifact_root).iterdir()] == []
