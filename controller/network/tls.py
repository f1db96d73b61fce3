"""Optional TLS for the router: a per-run CA and a server certificate for the router's names."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=7)


@dataclass(frozen=True, slots=True)
class RouterTLS:
    """The router's certificate chain; clients verify against ``ca_pem`` (public, per run).

    The CA's private key is discarded once the server certificate is signed, so nothing else can
    ever be issued under this run's CA. The server key stays in memory (and in a private
    temporary file only while the SSL context loads it).
    """

    ca_pem: bytes
    certificate_pem: bytes
    key_pem: bytes = field(repr=False)
    host_names: tuple[str, ...]

    @classmethod
    def generate(cls, host_names: Sequence[str]) -> RouterTLS:
        """A fresh CA and a server certificate for ``host_names`` (DNS names or IP addresses)."""
        names = tuple(dict.fromkeys(host_names))
        if not names:
            raise ValueError("name at least one host name the router is reached by")
        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "society-runner run CA")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        server_key = ec.generate_private_key(ec.SECP256R1())
        server_cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name)
            .public_key(server_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        return cls(
            ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
            certificate_pem=server_cert.public_bytes(serialization.Encoding.PEM),
            key_pem=server_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
            host_names=names,
        )

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        with tempfile.TemporaryDirectory(prefix="router-tls-") as directory:
            chain = Path(directory) / "chain.pem"
            key = Path(directory) / "key.pem"
            chain.touch(mode=0o600)
            key.touch(mode=0o600)
            chain.write_bytes(self.certificate_pem)
            key.write_bytes(self.key_pem)
            context.load_cert_chain(chain, key)
        return context

    def write_ca(self, path: Path) -> Path:
        """Write the CA certificate (public) for ``connect_agent(..., ca_file=path)``."""
        path.write_bytes(self.ca_pem)
        return path


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)
