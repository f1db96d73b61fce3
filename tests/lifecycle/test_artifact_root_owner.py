"""Another local user's artifact root is refused before anything in it is read or written.

The intruder is a second real user that the test creates. It makes the artifact root first in a
shared, sticky, world-writable directory (as ``/tmp`` is), or plants a state directory in a root
that others may write, with ``.temporal/server.json`` a symbolic link to a file of the
submitter's. ``society run`` and ``society status`` there must refuse with
the problem and the next step, start no dev server, and leave the link's target as
it was.
"""

from __future__ import annotations

import grp
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from lifecycle_support import SOCIETY
from other_user import LocalUser, other_user

from controller.run import new_run_id
from controller.run.artifact_root import ArtifactRootUnsafe, check_private

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hello.py"


@pytest.fixture
def intruder() -> Iterator[LocalUser]:
    with other_user() as user:
        yield user


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory like ``/tmp``: sticky, world-writable (outside the test's private tmp)."""
    directory = Path(tempfile.mkdtemp(prefix="society-shared-", dir="/tmp"))
    os.chmod(directory, 0o1777)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def plant_state_link(intruder: LocalUser, root: Path, victim: Path) -> None:
    """As the intruder: ``root/.temporal/`` (world-readable) with ``server.json`` -> victim."""
    state = root / ".temporal"
    intruder.run(["mkdir", "-m", "0777", str(state)])
    intruder.run(["ln", "-s", str(victim), str(state / "server.json")])


def society(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("TEMPORAL_ADDRESS", "SOCIETY_ARTIFACTS")
    }
    return subprocess.run(
        [*SOCIETY, *args, "--artifacts", str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_refused(result: subprocess.CompletedProcess[str], problem: str, code: int) -> None:
    assert result.returncode == code, result.stderr[-2000:]
    assert problem in result.stderr and "next step: use an artifact root of your own" in (
        result.stderr
    ), result.stderr


@pytest.mark.parametrize("command", ["run", "status"])
def test_a_root_another_user_made_first_is_refused_and_its_link_never_followed(
    intruder: LocalUser, shared: Path, tmp_path: Path, command: str
) -> None:
    victim = tmp_path / "precious.json"
    victim.write_text('{"mine": true}')
    os.chmod(victim, 0o644)
    root = shared / "artifacts"
    intruder.run(["mkdir", "-m", "0755", str(root)])
    plant_state_link(intruder, root, victim)
    args = ["run", str(EXAMPLE)] if command == "run" else ["status", new_run_id()]
    code = 2 if command == "run" else 1  # nothing ran; status: its error exit
    assert_refused(society(*args, root=root), f"is owned by uid {intruder.uid}", code)
    assert json.loads(victim.read_text()) == {"mine": True}
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert {p.stat(follow_symlinks=False).st_uid for p in root.rglob("*")} == {intruder.uid}


def test_a_root_others_may_write_is_refused_even_when_it_is_yours(
    intruder: LocalUser, shared: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "precious.json"
    victim.write_text('{"mine": true}')
    root = shared / "artifacts"
    root.mkdir()
    os.chmod(root, 0o1777)
    plant_state_link(intruder, root, victim)
    assert_refused(society("run", str(EXAMPLE), root=root), "may be written by others", 2)
    assert json.loads(victim.read_text()) == {"mine": True}
    assert sorted(p.name for p in root.iterdir()) == [".temporal"]


def test_a_root_only_your_own_private_group_may_write_is_yours(tmp_path: Path) -> None:
    """A ``umask 002`` desktop makes every directory group-writable by the user's own group."""
    root = tmp_path / "artifacts"
    root.mkdir()
    os.chmod(root, 0o775)
    os.chown(root, os.geteuid(), os.getegid())
    assert not grp.getgrgid(os.getegid()).gr_mem  # this user's group: no other member
    check_private(root)  # accepted
    os.chmod(root, 0o777)
    with pytest.raises(ArtifactRootUnsafe, match="may be written by others"):
        check_private(root)
