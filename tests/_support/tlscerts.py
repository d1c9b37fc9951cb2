"""Test certificates made with cryptography (no openssl CLI): an organisation CA and leaf
certificates for the scheduler's domain, good or wrong on purpose (another name, another CA,
a few days left). Shared by the unit tests and the Run:ai e2e (tests only)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Ca:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(cn: str, now: datetime | None = None) -> Ca:
    now = now or datetime.now(UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    return Ca(cert, key)


def make_leaf(ca: Ca, names: list[str], days: int = 365, ips: list[str] | None = None,
              now: datetime | None = None) -> tuple[bytes, bytes]:  # fmt: skip
    """(certificate PEM, unencrypted PKCS#8 key PEM) for the DNS names (the first is the CN)."""
    import ipaddress

    now = now or datetime.now(UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips or []]
    cert = (
        x509.CertificateBuilder().subject_name(_name(names[0])).issuer_name(ca.cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
        .sign(ca.key, hashes.SHA256())
    )  # fmt: skip
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def ca_pem(ca: Ca) -> bytes:
    return ca.cert.public_bytes(serialization.Encoding.PEM)


def write_tls(site_dir: Path, ca: Ca, cert_pem: bytes, key_pem: bytes) -> dict[str, str]:
    """Write tls/runai.crt, tls/runai.key (0600) and tls/org-ca.crt; the site.tls section."""
    d = site_dir / "tls"
    d.mkdir(exist_ok=True)
    (d / "runai.crt").write_bytes(cert_pem)
    key = d / "runai.key"
    key.touch(mode=0o600)
    key.chmod(0o600)
    key.write_bytes(key_pem)
    (d / "org-ca.crt").write_bytes(ca_pem(ca))
    return {"certificate": "tls/runai.crt", "key": "tls/runai.key", "ca": "tls/org-ca.crt"}
