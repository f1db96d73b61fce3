"""The GKE profile's Temporal credentials (from the chart's Secret) reach the client's options."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.service import TLSConfig

from controller.lifecycle.server import TemporalUnavailable, connection_credentials


def test_no_credentials_for_a_dev_server() -> None:
    assert connection_credentials({}) == {}


def test_an_api_key_connects_over_tls() -> None:
    assert connection_credentials({"TEMPORAL_API_KEY": "k"}) == {"api_key": "k", "tls": True}


def test_a_client_certificate_and_key_make_an_mtls_config(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_bytes(b"CERT")
    (tmp_path / "tls.key").write_bytes(b"KEY")
    tls = connection_credentials({"TEMPORAL_TLS_DIR": str(tmp_path)})["tls"]
    assert isinstance(tls, TLSConfig)
    assert (tls.client_cert, tls.client_private_key) == (b"CERT", b"KEY")


def test_an_empty_tls_directory_means_no_certificate(tmp_path: Path) -> None:
    assert connection_credentials({"TEMPORAL_TLS_DIR": str(tmp_path)}) == {}


def test_a_certificate_without_its_key_is_a_typed_error(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_bytes(b"CERT")
    with pytest.raises(TemporalUnavailable) as refused:
        connection_credentials({"TEMPORAL_TLS_DIR": str(tmp_path)})
    assert refused.value.reason == "temporal-tls-incomplete"
