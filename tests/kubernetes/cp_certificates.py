"""The test control plane's PKI: cluster CA, serving and client certs, webhook certs, kubeconfig."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class Pki:
    """The certificates a running control plane keeps using after they are written."""

    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    webhook_ca: KeyPair
    webhook: KeyPair


def issue(
    common_name: str,
    *,
    ca: KeyPair | None = None,
    is_ca: bool = False,
    organization: str | None = None,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
    rsa_pkcs1: bool = False,
) -> KeyPair:
    """A certificate and key (ECDSA P-256, PKCS#8; or RSA, PKCS#1 with `rsa_pkcs1`)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key: Any = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if rsa_pkcs1
        else ec.generate_private_key(ec.SECP256R1())
    )
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    subject = x509.Name(attributes)
    if ca is None:
        issuer, signing_key = subject, key
    else:
        issuer_cert = x509.load_pem_x509_certificate(ca.cert_pem)
        issuer = issuer_cert.subject
        signing_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        # Long-lived: Kueue's rotator replaces anything expiring within 90 days.
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if is_ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(signing_key, hashes.SHA256())
    return KeyPair(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL
            if rsa_pkcs1
            else serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def service_account_keys() -> tuple[bytes, bytes]:
    """A PEM RSA private key (PKCS#1) and its public key, for signing ServiceAccount tokens."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_pki(
    pki_dir: Path,
    *,
    webhook_ca_name: str,
    webhook_dns_names: Sequence[str],
) -> Pki:
    """Issue every certificate, write the components' files under `pki_dir`, return the PKI."""
    pki_dir.mkdir(exist_ok=True)
    ca = issue("society-runner-test-ca", is_ca=True)
    apiserver = issue(
        "kube-apiserver",
        ca=ca,
        dns_names=[
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
        ip_addresses=["127.0.0.1", "10.96.0.1"],
        server=True,
    )
    admin = issue("kubernetes-admin", ca=ca, organization="system:masters", client=True)
    # One webhook CA for the out-of-cluster controllers; named so Kueue's rotator keeps it.
    # Kueue's rotator also parses the CA key as PKCS#1 RSA.
    webhook_ca = issue(
        webhook_ca_name,
        is_ca=True,
        dns_names=[webhook_ca_name],
        organization="kueue",
        rsa_pkcs1=True,
    )
    webhook = issue(
        webhook_dns_names[0],
        ca=webhook_ca,
        dns_names=[*webhook_dns_names, "localhost"],
        ip_addresses=["127.0.0.1"],
        server=True,
    )
    # Lets controllers' delegated authentication trust the apiserver's proxied requests.
    front_proxy = issue("front-proxy-client", ca=ca, client=True)
    # The API server's identity towards kubelets (exec, logs, port-forward).
    kubelet_client = issue(
        "kube-apiserver-kubelet-client", ca=ca, organization="system:masters", client=True
    )
    sa_private, sa_public = service_account_keys()
    files = {
        "ca.crt": ca.cert_pem,
        "ca.key": ca.key_pem,
        "apiserver.crt": apiserver.cert_pem,
        "apiserver.key": apiserver.key_pem,
        "admin.crt": admin.cert_pem,
        "admin.key": admin.key_pem,
        "front-proxy-client.crt": front_proxy.cert_pem,
        "front-proxy-client.key": front_proxy.key_pem,
        "kubelet-client.crt": kubelet_client.cert_pem,
        "kubelet-client.key": kubelet_client.key_pem,
        "sa.key": sa_private,
        "sa.pub": sa_public,
    }
    for name, data in files.items():
        (pki_dir / name).write_bytes(data)
    return Pki(ca=ca, apiserver=apiserver, admin=admin, webhook_ca=webhook_ca, webhook=webhook)


def write_kubeconfig(path: Path, server: str, pki: Pki) -> None:
    """An admin kubeconfig (mode 0600) for `server`, with the certificates inline."""
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "society-test",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": b64(pki.ca.cert_pem),
                },
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": b64(pki.admin.cert_pem),
                    "client-key-data": b64(pki.admin.key_pem),
                },
            }
        ],
        "contexts": [
            {"name": "society-test", "context": {"cluster": "society-test", "user": "admin"}}
        ],
        "current-context": "society-test",
    }
    path.write_text(json.dumps(kubeconfig, indent=2))
    path.chmod(0o600)
