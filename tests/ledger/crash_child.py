"""Child process for the crash test: append forever, report each append after it returns.

    python crash_child.py LEDGER_DIR APPENDERS CHECKPOINT_EVERY

Prints ``<sequence> <n>`` to stdout (unbuffered, one write per line) once ``append`` returned.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from ledger_testkit import Counted, open_test_writer

import ledger.encoder


async def main(directory: Path, appenders: int) -> None:
    async with open_test_writer(directory, definition_id="test.crash") as writer:

        async def append_forever(slot: int) -> None:
            n = slot * 1_000_000
            while True:
                record = await writer.append(Counted(n=n), producer=f"p{slot}")
                os.write(1, f"{record.sequence} {n}\n".encode())
                n += 1

        async with anyio.create_task_group() as tasks:
            for slot in range(appenders):
                tasks.start_soon(append_forever, slot)


if __name__ == "__main__":
    # Checkpoints far more often than the default, so kills land between and after them.
    ledger.encoder.CHECKPOINT_EVERY_RECORDS = int(sys.argv[3])  # type: ignore[attr-defined]
    anyio.run(main, Path(sys.argv[1]), int(sys.argv[2]))
