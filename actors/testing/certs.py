"""Certificates minted for the NATS TLS tests and benchmarks: a CA and the certificates it signs,
written as PEM files. Nothing is pre-installed and no ``openssl`` command is run (the
``cryptography`` package of the ``test`` extra does it), so a fresh clone's tests make their own.

Rules:
- A server certificate names the hosts it is dialled by (IP SANs and DNS SANs: a client checks
  the host name against them) and is good for both ends of a connection (``serverAuth`` and
  ``clientAuth``): a cluster's route is a TLS client of the other server.
- Keys are EC P-256 (fast to make), written 0600; every certificate is valid from a minute ago
  for a day.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Minted", "mint_ca", "mint_leaf"]


@dataclass(frozen=True)
class Minted:
    """A certificate and its key, as files (and the objects, to sign more with a CA)."""

    cert: Path
    key: Path
    _cert: Any
    _key: Any


def _write_key(path: Path, key: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _builder(subject: str, issuer: str, public: Any) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def mint_ca(directory: Path, name: str = "shepherd test CA") -> Minted:
    """A self-signed CA in ``directory`` (``<stem>.pem``, ``<stem>.key``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    stem = name.replace(" ", "-")
    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return Minted(cert_path, key_path, cert, key)


def mint_leaf(
    ca: Minted,
    directory: Path,
    name: str = "server",
    *,
    ips: tuple[str, ...] = ("127.0.0.1",),
    dns: tuple[str, ...] = ("localhost",),
) -> Minted:
    """A certificate signed by ``ca`` for the hosts ``ips`` and ``dns`` (module rules)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    directory.mkdir(parents=True, exist_ok=True)
    both_ends = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(host) for host in dns]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    issuer = ca._cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)[0].value
    cert = (
        _builder(name, str(issuer), key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(both_ends),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca._key.public_key()),
            critical=False,
        )
        .sign(ca._key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return Minted(cert_path, key_path, cert, key)
