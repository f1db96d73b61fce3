"""A second, real local user for the tests that play another user of the machine."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pytest


@dataclass(frozen=True, slots=True)
class LocalUser:
    name: str
    uid: int
    gid: int

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """``argv`` as this user (no groups, no capabilities), from ``/``."""
        return subprocess.run(
            ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", *argv],
            cwd="/",
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )


@contextmanager
def other_user() -> Iterator[LocalUser]:
    """A fresh system user (no home, no login shell), deleted afterwards. Needs root, useradd
    and setpriv: under CI a machine without them fails the test rather than skipping it."""
    missing = [tool for tool in ("useradd", "userdel", "setpriv") if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        why = f"playing another local user needs root and {', '.join(missing) or 'useradd'}"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    name = f"sr-other-{secrets.token_hex(4)}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    try:
        entry = pwd.getpwnam(name)
        yield LocalUser(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)
