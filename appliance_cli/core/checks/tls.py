"""The scheduler UI's TLS certificate (`site.tls`), checked on the controller before the install:
Run:ai's backend needs a certificate for `site.domain` signed by the organisation's CA. The
certificate names the domain (subject alternative names, or the CN when it has none; wildcards
as RFC 6125 has them), chains to the CA, matches its key, and has 30 days or more left.
No network, no printing: results for preflight, problems for `config validate`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from appliance_cli.core.checks.model import CheckResult, Status
from appliance_cli.core.siteconfig import SiteConfig, Tls
from appliance_cli.fsutil import read_regular

EXPIRY_MIN_DAYS = 30
LAYER = "scheduler"
_PUB = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


class TlsFileError(Exception):
    """A file of site.tls that cannot be read or parsed: `field` (site.tls.key) and why."""

    def __init__(self, field: str, path: str, cause: str):
        super().__init__(f"site.tls.{field}: {path}: {cause}")
        self.field, self.path, self.cause = field, path, cause


@dataclass(frozen=True)
class TlsFiles:
    chain: list[x509.Certificate]  # the certificate first, then any intermediates after it
    key: object  # a private key; only its public half is ever used
    cas: list[x509.Certificate]


# A CA bundle is kilobytes; a file past this is not one
PEM_LIMIT = 16 * 1024**2


def _read(cfg: SiteConfig, field: str, path: str) -> bytes:
    try:
        return read_regular(cfg.resolve(path), PEM_LIMIT)
    except OSError as exc:
        raise TlsFileError(field, path, f"cannot read it ({exc.strerror or exc})") from None


def _certs(cfg: SiteConfig, field: str, path: str) -> list[x509.Certificate]:
    data = _read(cfg, field, path)
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise TlsFileError(field, path, "not a PEM certificate (-----BEGIN CERTIFICATE-----)") from None


def load_files(cfg: SiteConfig, tls: Tls) -> TlsFiles:
    """The three files, parsed; the first that cannot be is a TlsFileError naming its field."""
    chain = _certs(cfg, "certificate", tls.certificate)
    data = _read(cfg, "key", tls.key)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # cryptography: "Password was not given but private key is encrypted"
        raise TlsFileError("key", tls.key, "the key is encrypted: give it unencrypted (0600)") from None
    except (ValueError, UnsupportedAlgorithm):
        raise TlsFileError(
            "key", tls.key, "not a PEM private key (-----BEGIN ... PRIVATE KEY-----)"
        ) from None
    return TlsFiles(chain, key, _certs(cfg, "ca", tls.ca))


def file_problems(cfg: SiteConfig) -> list[str]:
    """For `config validate`: a file of site.tls that cannot be read or parsed, one line."""
    if cfg.site.tls is None:
        return []
    try:
        load_files(cfg, cfg.site.tls)
    except TlsFileError as exc:
        return [str(exc)]
    return []


def names(cert: x509.Certificate) -> list[str]:
    """The DNS names a client matches: the SAN's, or the subject CN when there is no DNS SAN."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = san.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        dns = []
    if dns:
        return dns
    return [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]


def matches(pattern: str, domain: str) -> bool:
    """RFC 6125 6.4.3: case-insensitive; a `*` only as the whole left-most label, standing for
    exactly one label (`*.acme.example` covers `runai.acme.example`, not `acme.example` nor
    `a.b.acme.example`), and never with fewer than two labels after it."""
    p, d = pattern.lower().rstrip(".").split("."), domain.lower().rstrip(".").split(".")
    if len(p) != len(d):
        return False
    if p[0] == "*":
        return len(p) >= 3 and bool(d[0]) and p[1:] == d[1:] and "*" not in "".join(p[1:])
    return p == d


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def chains_to(chain: list[x509.Certificate], cas: list[x509.Certificate]) -> bool:
    """From the certificate through the intermediates after it in its file up to one of the CAs."""
    current, pool = chain[0], list(chain[1:])
    for _ in range(len(chain)):
        if any(_issued_by(current, ca) for ca in cas):
            return True
        nxt = next((c for c in pool if _issued_by(current, c)), None)
        if nxt is None:
            return False
        pool.remove(nxt)
        current = nxt
    return False


def _result(check: str, status: Status, value: str, expected: str, hint: str = "") -> CheckResult:
    return CheckResult(check, LAYER, "site", status, value, expected, hint)


def _domain(tls: Tls, cert: x509.Certificate, domain: str) -> CheckResult:
    found = names(cert)
    expected = f"a name matching {domain}"
    if any(matches(n, domain) for n in found):
        return _result("tls_domain", Status.PASS, f"{tls.certificate}: {', '.join(found)}", expected)
    return _result("tls_domain", Status.FAIL, f"{tls.certificate}: issued for {', '.join(found) or 'no name'}, not {domain}",
                   expected, f"have the organisation's CA issue one with {domain} among its subject alternative names")  # fmt: skip


def _chain(tls: Tls, files: TlsFiles) -> CheckResult:
    expected = f"signed by {tls.ca}"
    if chains_to(files.chain, files.cas):
        return _result("tls_chain", Status.PASS, f"{tls.certificate}: signed by {tls.ca}", expected)
    issuer = files.chain[-1].issuer.rfc4514_string()
    return _result("tls_chain", Status.FAIL, f"{tls.certificate}: not signed by {tls.ca} (issuer: {issuer})", expected,
                   "use the certificate the organisation's CA issued, or set site.tls.ca to its issuer "
                   "(intermediates follow the certificate in its file)")  # fmt: skip


def _key(tls: Tls, files: TlsFiles) -> CheckResult:
    expected = f"the private key of {tls.certificate}"
    public = getattr(files.key, "public_key", None)
    mine = files.chain[0].public_key().public_bytes(*_PUB)
    ok = public is not None and public().public_bytes(*_PUB) == mine
    if ok:
        return _result("tls_key", Status.PASS, f"{tls.key}: matches {tls.certificate}", expected)
    return _result("tls_key", Status.FAIL, f"{tls.key}: does not match {tls.certificate}", expected,
                   "use the key the certificate was requested with (the public keys of both must be equal)")  # fmt: skip


def _expiry(tls: Tls, cert: x509.Certificate, now: datetime) -> CheckResult:
    end, start = cert.not_valid_after_utc, cert.not_valid_before_utc
    left = (end - now).days
    expected = f">= {EXPIRY_MIN_DAYS} days of validity left"
    hint = "renew it with the organisation's CA before installing (the scheduler UI stops answering the day it expires)"
    if now < start:
        return _result("tls_expiry", Status.FAIL, f"{tls.certificate}: not valid before {start:%Y-%m-%d}", expected,
                       "check the controller's clock and the certificate's dates")  # fmt: skip
    if end <= now:
        return _result(
            "tls_expiry", Status.FAIL, f"{tls.certificate}: expired on {end:%Y-%m-%d}", expected, hint
        )
    if left < EXPIRY_MIN_DAYS:
        return _result("tls_expiry", Status.FAIL, f"{tls.certificate}: expires on {end:%Y-%m-%d}, in {left} days",
                       expected, hint)  # fmt: skip
    return _result("tls_expiry", Status.PASS, f"{tls.certificate}: valid until {end:%Y-%m-%d}", expected)


def tls_results(cfg: SiteConfig, now: datetime | None = None) -> list[CheckResult]:
    """One result per check (domain, chain, key, expiry); nothing without a TLS section unless
    the scheduler is Run:ai (a warning: its backend needs the certificate)."""
    tls, domain = cfg.site.tls, cfg.site.domain or ""
    if tls is None:
        if cfg.scheduler.stack != "runai":
            return []
        return [_result("tls", Status.WARN, "site.tls is not set", f"a certificate for {domain or 'site.domain'} "
                        "signed by the organisation's CA", "the Run:ai backend needs it: add site.tls "
                        "{certificate, key, ca} (PEM files, relative to the site directory)")]  # fmt: skip
    try:
        files = load_files(cfg, tls)
    except TlsFileError as exc:
        return [_result("tls_files", Status.FAIL, str(exc), "readable PEM files",
                        "put the PEM files there (paths are relative to the site directory)")]  # fmt: skip
    now = now or datetime.now(UTC)
    cert = files.chain[0]
    return [_domain(tls, cert, domain), _chain(tls, files), _key(tls, files), _expiry(tls, cert, now)]


_FIELDS = {
    "tls_domain": "certificate",
    "tls_chain": "certificate",
    "tls_key": "key",
    "tls_expiry": "certificate",
}


def install_refusals(cfg: SiteConfig, now: datetime | None = None) -> list[str]:
    """What makes `appliance install` refuse a Run:ai site before anything runs, one line each
    naming the field: no site.tls, or a certificate that does not name site.domain, is not
    signed by site.tls.ca, does not match its key, or has fewer than 30 days left. Nothing for
    the other stacks (preflight still reports their certificate)."""
    if cfg.scheduler.stack != "runai":
        return []
    if cfg.site.tls is None:
        return [
            f"site.tls: required when scheduler.stack is 'runai': the backend's certificate for "
            f"{cfg.site.domain or 'site.domain'}, its key and the organisation's CA"
        ]
    failed = [r for r in tls_results(cfg, now) if r.status is Status.FAIL]
    return [
        f"site.tls.{_FIELDS.get(r.check, 'certificate')}: {r.value} (expected {r.expected})" for r in failed
    ]


def refusal_hint(cfg: SiteConfig, now: datetime | None = None) -> str:
    """The hint of the first refusal (install_refusals)."""
    if cfg.site.tls is None:
        return (
            "add site.tls {certificate, key, ca} (PEM files, relative to the site directory) to "
            "appliance.yml; `appliance config validate` reads them"
        )
    failed = [r for r in tls_results(cfg, now) if r.status is Status.FAIL]
    return failed[0].hint if failed else ""
