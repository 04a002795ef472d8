"""A throwaway CA, server certificate and optional client certificate for one run.

``generate`` writes PEM files into a private directory (mode 0700, keys 0600) that lies
outside the result folder: the CA signs a server certificate for ``127.0.0.1`` and
``localhost`` (both as subject alternative names) and, when asked, a client certificate.
Keys are ECDSA P-256 (fast to make, supported by every broker here). The CA's key is not
kept: nothing can be signed with it after the run. ``TlsMaterial.describe`` is what the
manifest records: algorithms and SHA-256 fingerprints, never a key.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAMES = ("localhost",)
SERVER_ADDRESSES = ("127.0.0.1", "::1")
VALIDITY = dt.timedelta(days=2)
KEY_ALGORITHM = "ECDSA P-256"
SIGNATURE_ALGORITHM = "ecdsa-with-SHA256"


@dataclass(frozen=True)
class TlsMaterial:
    """Where one run's CA and certificates are (PEM files) and what they are."""

    directory: Path
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path | None
    client_key: Path | None
    fingerprints: dict[str, str]
    """Certificate name -> SHA-256 fingerprint (hex, colon-separated)."""

    def describe(self) -> dict[str, Any]:
        """Facts for the manifest: algorithms, names and fingerprints (no key material)."""
        return {
            "generated": True,
            "key_algorithm": KEY_ALGORITHM,
            "signature_algorithm": SIGNATURE_ALGORITHM,
            "server_names": [*SERVER_NAMES, *SERVER_ADDRESSES],
            "client_certificate": self.client_cert is not None,
            "sha256_fingerprints": dict(self.fingerprints),
        }


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "mqbench throwaway"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write(path, pem, 0o600)


def _fingerprint(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex(":")


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    usage: x509.ObjectIdentifier,
    now: dt.datetime,
    san: x509.SubjectAlternativeName | None,
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def generate(directory: Path, *, client_cert: bool = False) -> TlsMaterial:
    """Create ``directory`` (0700) and write ``ca.pem``, ``server.pem``/``server.key`` and,
    with ``client_cert``, ``client.pem``/``client.key`` into it."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    now = dt.datetime.now(dt.UTC)
    ca_key = _key()
    ca_name = _name("mqbench throwaway CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    san = x509.SubjectAlternativeName(
        [x509.DNSName(n) for n in SERVER_NAMES]
        + [x509.IPAddress(ipaddress.ip_address(a)) for a in SERVER_ADDRESSES]
    )
    server_key = _key()
    server_cert = _issue(
        "127.0.0.1", server_key, ca_cert, ca_key, ExtendedKeyUsageOID.SERVER_AUTH, now, san
    )
    paths = {
        "ca": directory / "ca.pem",
        "server": directory / "server.pem",
        "server_key": directory / "server.key",
    }
    _write(paths["ca"], ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(paths["server"], server_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write_key(paths["server_key"], server_key)
    fingerprints = {"ca": _fingerprint(ca_cert), "server": _fingerprint(server_cert)}
    client_path: Path | None = None
    client_key_path: Path | None = None
    if client_cert:
        client_key = _key()
        cert = _issue(
            "mqbench client",
            client_key,
            ca_cert,
            ca_key,
            ExtendedKeyUsageOID.CLIENT_AUTH,
            now,
            None,
        )
        client_path = directory / "client.pem"
        client_key_path = directory / "client.key"
        _write(client_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        _write_key(client_key_path, client_key)
        fingerprints["client"] = _fingerprint(cert)
    return TlsMaterial(
        directory,
        paths["ca"],
        paths["server"],
        paths["server_key"],
        client_path,
        client_key_path,
        fingerprints,
    )
