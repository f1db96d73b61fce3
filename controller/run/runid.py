"""Run ids: ``sr-`` and 32 lowercase hex digits, on every profile (also the run's namespace)."""

from __future__ import annotations

import re
import secrets

from controller.errors import SetupError

RUN_ID_PATTERN = re.compile(r"^sr-[0-9a-f]{32}$")


class RunIdError(SetupError, ValueError):
    """A run id does not have the one format."""

    reason = "bad-run-id"


def new_run_id() -> str:
    return f"sr-{secrets.token_hex(16)}"


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or RUN_ID_PATTERN.match(run_id) is None:
        raise RunIdError(f"run id {run_id!r} is not 'sr-' followed by 32 lowercase hex digits")
    return run_id
