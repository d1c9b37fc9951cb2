"""Preflight's check of the scheduler UI's certificate (site.tls), on certificates made here with
cryptography: a good one, one for another name, one from another CA, one expiring in 10 days and
one with the wrong key each give the exact line a field engineer reads."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from appliance_cli.core.checks.model import Status
from appliance_cli.core.checks.tls import matches, tls_results
from appliance_cli.core.siteconfig import SiteConfig, load_site
from tests._support.paths import EXAMPLE

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
DOMAIN = "runai.acme.example"  # the example's site.domain


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    cert = (
        x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(NOW - timedelta(days=365))
        .not_valid_after(NOW + timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256())
    )  # fmt: skip
    return cert, key


def _leaf(ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], key: ec.EllipticCurvePrivateKey,
          sans: list[str] | None, days: int = 365, cn: str = DOMAIN) -> x509.Certificate:  # fmt: skip
    b = (
        x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca[0].subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(NOW - timedelta(days=1))
        .not_valid_after(NOW + timedelta(days=days))
    )  # fmt: skip
    if sans is not None:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(s) for s in sans]), critical=False)
    return b.sign(ca[1], hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.fixture(scope="module")
def org_ca() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    return _ca("ACME Root CA")


def _site(tmp_path: Path, ca, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, tls: bool = True) -> SiteConfig:  # fmt: skip
    shutil.copy(EXAMPLE, tmp_path / "appliance.yml")
    if tls:
        data = yaml.safe_load((tmp_path / "appliance.yml").read_text())
        data["site"]["tls"] = {"certificate": "tls/runai.crt", "key": "tls/runai.key", "ca": "tls/org-ca.crt"}
        (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
        (tmp_path / "tls").mkdir()
        (tmp_path / "tls" / "runai.crt").write_bytes(_pem(cert))
        (tmp_path / "tls" / "runai.key").write_bytes(_key_pem(key))
        (tmp_path / "tls" / "org-ca.crt").write_bytes(_pem(ca[0]))
    return load_site(tmp_path)


def _failed(cfg: SiteConfig) -> list[tuple[str, str, str]]:
    return [(r.check, r.value, r.hint) for r in tls_results(cfg, NOW) if r.status is not Status.PASS]


def test_a_good_certificate_passes_every_check(tmp_path: Path, org_ca) -> None:
    key = _key()
    res = tls_results(_site(tmp_path, org_ca, _leaf(org_ca, key, [DOMAIN, "runai"]), key), NOW)
    assert [(r.check, r.status, r.node, r.layer) for r in res] == [
        (c, Status.PASS, "site", "scheduler") for c in ("tls_domain", "tls_chain", "tls_key", "tls_expiry")
    ]
    assert res[3].value == "tls/runai.crt: valid until 2027-11-24"


def test_a_certificate_for_another_name_fails_naming_both(tmp_path: Path, org_ca) -> None:
    key = _key()
    cfg = _site(tmp_path, org_ca, _leaf(org_ca, key, ["www.acme.example"]), key)
    assert _failed(cfg) == [(
        "tls_domain", "tls/runai.crt: issued for www.acme.example, not runai.acme.example",
        "have the organisation's CA issue one with runai.acme.example among its subject alternative names",
    )]  # fmt: skip


def test_a_certificate_from_another_ca_fails_naming_its_issuer(tmp_path: Path, org_ca) -> None:
    key = _key()
    cfg = _site(tmp_path, org_ca, _leaf(_ca("Some Other CA"), key, [DOMAIN]), key)
    [(check, value, hint)] = _failed(cfg)
    assert (check, value) == (
        "tls_chain",
        "tls/runai.crt: not signed by tls/org-ca.crt (issuer: CN=Some Other CA)",
    )
    assert hint.startswith("use the certificate the organisation's CA issued")


def test_a_certificate_expiring_in_10_days_fails(tmp_path: Path, org_ca) -> None:
    key = _key()
    cfg = _site(tmp_path, org_ca, _leaf(org_ca, key, [DOMAIN], days=10), key)
    [(check, value, hint)] = _failed(cfg)
    assert (check, value) == ("tls_expiry", "tls/runai.crt: expires on 2026-12-04, in 10 days")
    assert hint.startswith("renew it with the organisation's CA")


def test_a_key_of_another_certificate_fails(tmp_path: Path, org_ca) -> None:
    cfg = _site(tmp_path, org_ca, _leaf(org_ca, _key(), [DOMAIN]), _key())
    [(check, value, _)] = _failed(cfg)
    assert (check, value) == ("tls_key", "tls/runai.key: does not match tls/runai.crt")


def test_no_tls_section_on_a_runai_site_warns(tmp_path: Path, org_ca) -> None:
    [r] = tls_results(_site(tmp_path, org_ca, None, None, tls=False), NOW)  # type: ignore[arg-type]
    assert (r.check, r.status, r.value) == ("tls", Status.WARN, "site.tls is not set")
    assert "the Run:ai backend needs it" in r.hint


def test_an_unreadable_file_is_one_failure_naming_the_field(tmp_path: Path, org_ca) -> None:
    key = _key()
    cfg = _site(tmp_path, org_ca, _leaf(org_ca, key, [DOMAIN]), key)
    (tmp_path / "tls" / "org-ca.crt").write_text("not a certificate\n")
    [r] = tls_results(cfg, NOW)
    assert (r.check, r.status, r.value) == (
        "tls_files", Status.FAIL, "site.tls.ca: tls/org-ca.crt: not a PEM certificate (-----BEGIN CERTIFICATE-----)")  # fmt: skip


def test_the_cn_counts_only_without_a_san(tmp_path: Path, org_ca) -> None:
    key = _key()
    assert not _failed(_site(tmp_path, org_ca, _leaf(org_ca, key, None), key))
    other = tmp_path / "other"
    other.mkdir()
    [(check, value, _)] = _failed(_site(other, org_ca, _leaf(org_ca, key, ["x.acme.example"]), key))
    assert (check, value) == (
        "tls_domain",
        "tls/runai.crt: issued for x.acme.example, not runai.acme.example",
    )


@pytest.mark.parametrize(
    ("pattern", "ok"),
    [
        ("runai.acme.example", True), ("RUNAI.Acme.Example.", True), ("*.acme.example", True),
        ("*.example", False), ("*.runai.acme.example", False), ("*.*.example", False),
        ("r*.acme.example", False), ("acme.example", False), ("runai.acme.example.org", False),
    ],
)  # fmt: skip
def test_wildcards_cover_one_left_most_label(pattern: str, ok: bool) -> None:
    assert matches(pattern, "runai.acme.example") is ok


def test_a_wildcard_needs_two_labels_after_it() -> None:
    assert not matches("*.example", "acme.example")


def test_config_validate_refuses_an_unparseable_certificate_in_one_line(
    tmp_path: Path, org_ca, capsys
) -> None:
    from appliance_cli.cli.main import main

    key = _key()
    _site(tmp_path, org_ca, _leaf(org_ca, key, [DOMAIN]), key)
    assert main(["config", "validate", str(tmp_path)]) == 0
    (tmp_path / "tls" / "runai.crt").write_text("-----BEGIN CERTIFICATE-----\ngarbage\n")
    assert main(["config", "validate", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    line = f"{tmp_path / 'appliance.yml'}: site.tls.certificate: tls/runai.crt: not a PEM certificate"
    assert line in err and "Traceback" not in err
    (tmp_path / "tls" / "runai.crt").unlink()
    assert main(["config", "validate", str(tmp_path)]) == 2
    assert (
        "site.tls.certificate: tls/runai.crt: cannot read it (No such file or directory)"
        in capsys.readouterr().err
    )


def test_preflight_runs_the_tls_checks_on_the_controller(tmp_path: Path, org_ca) -> None:
    """No node is asked: the probe's transport answers an empty probe, the certificate fails."""
    from appliance_cli.core.checks.preflight import run_preflight

    key = _key()
    cfg = _site(tmp_path, org_ca, _leaf(_ca("Some Other CA"), key, [DOMAIN]), key)
    report = run_preflight(cfg, transport=lambda node, args, script: (0, "probe_end=1\n", ""))
    assert [(r.node, r.check) for r in report.failed if r.layer == "scheduler"] == [("site", "tls_chain")]
