"""Child process for the sync-process tests: a writer whose own process a test limits or kills.

    python sync_child.py LEDGER_DIR fill    # append until the writer fails; print what happened
    python sync_child.py LEDGER_DIR linger  # print the sync process's pid, then append forever

``fill`` prints one JSON line: the appends that returned, and the error's reason and detail.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
from ledger_testkit import Counted, open_test_writer

from ledger import LedgerWriteError


async def main(directory: Path, mode: str) -> None:
    returned = 0
    async with open_test_writer(directory, definition_id="test.sync") as writer:
        if mode == "linger":
            print(writer.sync_process_pid, flush=True)
        try:
            while True:
                await writer.append(Counted(n=returned), producer="p")
                returned += 1
        except LedgerWriteError as exc:
            print(json.dumps({"returned": returned, "reason": exc.reason, "detail": exc.detail}))


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), sys.argv[2])
