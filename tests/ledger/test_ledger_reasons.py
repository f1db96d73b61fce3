"""The list of verification reasons is one generated table: the code and docs/ledger-format.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger import VERIFICATION_REASONS, verification_reasons
from ledger.reasons import INPUT_REASONS, RUN_REASONS, reasons_markdown

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "ledger-format.md"


def test_every_reason_has_a_one_line_meaning() -> None:
    reasons = verification_reasons()
    assert list(reasons) == [*VERIFICATION_REASONS, *RUN_REASONS, *INPUT_REASONS]
    assert len(reasons) == len(VERIFICATION_REASONS) + len(RUN_REASONS) + len(INPUT_REASONS)
    for reason, meaning in reasons.items():
        assert reason == reason.lower() and " " not in reason
        assert meaning and "\n" not in meaning and "|" not in meaning, reason


@pytest.mark.parametrize("document", [DOCS], ids=["docs/ledger-format.md"])
def test_the_documents_carry_the_generated_table(document: Path) -> None:
    text = document.read_text(encoding="utf-8")
    start = text.index("<!-- reasons:start")
    start = text.index("\n", start) + 1
    end = text.index("<!-- reasons:end -->")
    assert text[start:end] == reasons_markdown(), "paste ledger.reasons.reasons_markdown()"
