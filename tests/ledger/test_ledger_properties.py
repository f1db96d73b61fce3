"""Properties: canonical JSON is one stable byte form; envelopes and events round-trip."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_testkit import Counted, Said, catalog

from ledger import RecordEnvelope
from ledger.canonical import canonical_json

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    scalars.filter(lambda v: not (isinstance(v, float) and math.isinf(v))),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=25,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=6)


def _reference(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


@settings(deadline=None)
@given(json_values)
def test_canonical_json_round_trips_and_is_a_fixed_point(value: Any) -> None:
    encoded = canonical_json(value)
    assert json.loads(encoded) == value
    assert canonical_json(json.loads(encoded)) == encoded
    assert encoded == _reference(value)


@settings(deadline=None)
@given(st.dictionaries(st.text(), json_values, min_size=2, max_size=8), st.randoms())
def test_canonical_json_ignores_key_insertion_order(value: dict[str, Any], rng: Any) -> None:
    keys = list(value)
    rng.shuffle(keys)
    assert canonical_json({key: value[key] for key in keys}) == canonical_json(value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, {"a": [math.nan]}])
def test_canonical_json_refuses_nan_and_infinity(bad: Any) -> None:
    with pytest.raises(ValueError):
        canonical_json(bad)


digests = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
envelope_fields = st.fixed_dictionaries(
    dict(
        run_id=st.text(min_size=1),
        event_id=st.text(min_size=1),
        logical_sequence=st.integers(min_value=0, max_value=2**63 - 1),
        elapsed_nanos=st.integers(min_value=0, max_value=2**63 - 1),
        observed_at=st.text(),
        producer=st.text(),
        causation_id=st.none() | st.text(),
        correlation_id=st.none() | st.text(),
        prev_digest=digests,
        event=st.builds(lambda tag, body: {**body, "tag": tag}, st.text(min_size=1), json_objects),
    )
)
# (st.builds would read pydantic's alias-named signature and fill the camelCase names as well)
envelopes = envelope_fields.map(lambda fields: RecordEnvelope(**fields))


@settings(deadline=None)
@given(envelopes)
def test_an_envelope_survives_its_canonical_line(envelope: RecordEnvelope) -> None:
    line = envelope.canonical()
    assert b"\n" not in line  # one record, one line
    again = RecordEnvelope.model_validate_json(line, strict=True)
    assert again == envelope
    assert again.canonical() == line


@settings(deadline=None)
@given(
    st.builds(Said, speaker=st.text(), text=st.text())
    | st.builds(Counted, n=st.integers(min_value=-(2**70), max_value=2**70))
)
def test_an_event_survives_encode_and_decode(event: Said | Counted) -> None:
    line = canonical_json(catalog.encode(event))
    assert catalog.decode(json.loads(line)) == event
