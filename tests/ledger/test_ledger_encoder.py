"""The record encoder spells the envelope by hand; its bytes are the general canonical encoder's."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_testkit import RUN_ID, Said

from ledger.canonical import canonical_json
from ledger.encoder import RecordEncoder
from ledger.errors import LedgerEncodingError
from ledger.signing import SigningKey

_ids = st.none() | st.text(max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    speaker=st.text(max_size=40),
    text=st.text(),
    producer=st.text(max_size=40),
    causation=_ids,
    correlation=_ids,
)
def test_an_encoded_record_is_the_canonical_json_of_its_envelope(
    speaker: str, text: str, producer: str, causation: str | None, correlation: str | None
) -> None:
    encoder = RecordEncoder(RUN_ID, "0" * 64, SigningKey.generate())
    event = Said(speaker=speaker, text=text)
    try:
        line, record = encoder.encode(event, producer, causation, correlation)
    except LedgerEncodingError:  # a lone surrogate somewhere: the general encoder refuses too
        with pytest.raises(UnicodeEncodeError):
            for value in (speaker, text, producer, causation or "", correlation or ""):
                value.encode("utf-8")
        return
    assert line.endswith(b"\n")
    assert line[:-1] == canonical_json(
        record.envelope.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    assert json.loads(line)["event"] == event.to_wire()
    assert event.to_wire() == {"tag": Said.tag, **event.model_dump(mode="json", by_alias=True)}


def test_a_checkpoint_line_is_canonical_too() -> None:
    encoder = RecordEncoder(RUN_ID, "0" * 64, SigningKey.generate())
    encoder.encode(Said(speaker="a", text='é\u2603\n"\\'), "p", None, None)
    line = encoder.encode_checkpoint()
    assert line[:-1] == canonical_json(json.loads(line))
