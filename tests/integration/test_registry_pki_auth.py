"""The registry role's registry_pki and registry_auth modules with the REAL openssl and htpasswd,
on a temporary directory: what they create, with which modes, what a re-run, a SAN change, a
damaged htpasswd entry and check mode do."""

from __future__ import annotations

import grp
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests._support.modules import FakeModule, ModuleFailed, load_role_module, run_for_real

GROUP = "docker-registry"
pytestmark = pytest.mark.skipif(
    not (
        shutil.which("openssl") and shutil.which("htpasswd") and GROUP in {g.gr_name for g in grp.getgrall()}
    ),
    reason="needs openssl, apache2-utils (htpasswd) and the docker-registry group: scripts/bootstrap.sh installs them",
)
pki = load_role_module("registry", "registry_pki")
auth = load_role_module("registry", "registry_auth")
SAN = "subjectAltName = IP:10.77.0.11, DNS:master1\n"


def real_module(params: dict[str, Any], check_mode: bool = False) -> FakeModule:
    """The module double running the real tools."""
    return FakeModule(params, check_mode=check_mode, answer=run_for_real)


def pki_params(d: Path, san: str = SAN) -> dict[str, Any]:
    return {
        "pki_dir": str(d),
        "group": GROUP,
        "ca_key": str(d / "ca.key"),
        "ca_cert": str(d / "ca.crt"),
        "ca_subject": "/CN=Appliance registry CA (test)",
        "ca_days": 30,
        "ca_key_bits": 2048,
        "tls_key": str(d / "registry.key"),
        "tls_cert": str(d / "registry.crt"),
        "tls_days": 10,
        "common_name": "10.77.0.11",
        "san_content": san,
    }


def mode_owner(p: Path) -> tuple[str, str]:
    st = p.stat()
    return oct(stat.S_IMODE(st.st_mode)), grp.getgrgid(st.st_gid).gr_name


def serial(cert: Path) -> str:
    return subprocess.check_output(["openssl", "x509", "-in", str(cert), "-noout", "-serial"], text=True)


def test_pki_creates_ca_and_server_cert_with_private_modes_then_changes_nothing(tmp_path):
    d = tmp_path / "pki"
    r = pki.converge(real_module(pki_params(d)))
    assert r["changed"] and r["issued"] == [
        "directory",
        "CA key",
        "CA certificate",
        "server key",
        "certificate request",
        "server certificate",
    ]
    assert mode_owner(d) == ("0o750", GROUP)
    assert mode_owner(d / "ca.key") == ("0o600", "root")
    assert mode_owner(d / "registry.key") == ("0o640", GROUP)
    assert oct(stat.S_IMODE((d / "registry.crt").stat().st_mode)) == "0o644"
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(d / "ca.crt"), str(d / "registry.crt")],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stderr
    text = subprocess.check_output(
        ["openssl", "x509", "-in", str(d / "registry.crt"), "-noout", "-text"], text=True
    )
    assert "IP Address:10.77.0.11" in text and "DNS:master1" in text
    assert r["ca_cert_b64"] and "PRIVATE" not in str(r)  # the CA cert (public) comes back, no key
    again = real_module(pki_params(d))
    assert pki.converge(again) == {**r, "changed": False, "issued": [], "cert_issued": False, "diff": []}
    assert again.ran == []


def test_pki_reissues_on_a_san_change_and_repairs_a_loose_key_mode(tmp_path):
    d = tmp_path / "pki"
    pki.converge(real_module(pki_params(d)))
    before, ca_before = serial(d / "registry.crt"), (d / "ca.crt").read_bytes()
    os.chmod(d / "registry.key", 0o644)
    check = pki.converge(real_module(pki_params(d, SAN.replace("master1", "registry.site")), check_mode=True))
    assert check["changed"] and check["cert_issued"] and serial(d / "registry.crt") == before
    assert oct(stat.S_IMODE((d / "registry.key").stat().st_mode)) == "0o644"  # check mode touched nothing
    r = pki.converge(real_module(pki_params(d, SAN.replace("master1", "registry.site"))))
    assert r["issued"] == ["server certificate"] and serial(d / "registry.crt") != before
    assert (d / "ca.crt").read_bytes() == ca_before  # same CA, same key
    assert mode_owner(d / "registry.key") == ("0o640", GROUP)
    assert r["diff"][0]["before"] == SAN


def auth_params(d: Path) -> dict[str, Any]:
    return {
        "auth_dir": str(d),
        "group": GROUP,
        "username": "appliance",
        "password_file": str(d / "appliance.password"),
        "htpasswd_file": str(d / "htpasswd"),
    }


def htpasswd_accepts(d: Path, password: str) -> bool:
    p = subprocess.run(
        ["htpasswd", "-v", "-i", str(d / "htpasswd"), "appliance"],
        input=password,
        capture_output=True,
        text=True,
    )
    return p.returncode == 0


def test_auth_generates_a_private_password_and_a_bcrypt_entry_once(tmp_path):
    d = tmp_path / "auth"
    check = auth.converge(real_module(auth_params(d), check_mode=True))
    assert check == {"changed": True, "password": "", "htpasswd_written": True} and not d.exists()
    r = auth.converge(real_module(auth_params(d)))
    assert r["changed"] and r["htpasswd_written"] and len(r["password"]) == 48
    assert mode_owner(d) == ("0o750", GROUP)
    assert mode_owner(d / "appliance.password") == ("0o600", "root")
    assert mode_owner(d / "htpasswd") == ("0o640", GROUP)
    assert (d / "htpasswd").read_text().startswith("appliance:$2y$")
    assert htpasswd_accepts(d, r["password"])
    again = auth.converge(real_module(auth_params(d)))
    assert again == {"changed": False, "password": r["password"], "htpasswd_written": False}


def test_auth_rewrites_a_damaged_or_stale_entry_and_keeps_the_password(tmp_path):
    d = tmp_path / "auth"
    first = auth.converge(real_module(auth_params(d)))
    (d / "htpasswd").write_text("appliance:$2y$05$bogus\n")  # htpasswd -v cannot even read it (rc 9)
    check = auth.converge(real_module(auth_params(d), check_mode=True))
    assert check["changed"] and check["htpasswd_written"] and not htpasswd_accepts(d, first["password"])
    r = auth.converge(real_module(auth_params(d)))
    assert r["changed"] and r["htpasswd_written"] and r["password"] == first["password"]
    assert htpasswd_accepts(d, first["password"])


@pytest.mark.parametrize("damage", [b"", b"\n", b"pa55\xe9word\n"])
def test_auth_refuses_a_damaged_password_file_naming_it_and_changes_nothing(tmp_path, damage):
    d = tmp_path / "auth"
    auth.converge(real_module(auth_params(d)))
    (d / "appliance.password").write_bytes(damage)
    before = (d / "htpasswd").read_bytes()
    with pytest.raises(
        ModuleFailed, match=r"appliance.password: damaged \(empty, or bytes that are not UTF-8\)"
    ):
        auth.converge(real_module(auth_params(d)))
    assert (d / "appliance.password").read_bytes() == damage and (d / "htpasswd").read_bytes() == before
