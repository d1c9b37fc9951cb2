"""A file the site config names (site.tls, ssh.known_hosts, the OIDC CA, bundle.public_key) or
appliance.yml itself is read only when it is a regular file: a FIFO there made `config validate`
wait for a writer forever, a symlink to /dev/zero read until memory ran out. Each is one line
naming the field and the path, at once. The CLI runs in a subprocess with a timeout: a hang
fails the test instead of the run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.errors import ApplianceError
from tests._support.paths import EXAMPLE, ROOT
from tests._support.tlscerts import make_ca, make_leaf, write_tls

DOMAIN = "runai.acme.example"  # the example's site.domain
STRANGERS = ["fifo", "directory", "/dev/zero", "/dev/null"]


def _stranger(path: Path, kind: str) -> None:
    """Replace `path` with something that is not a regular file."""
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(kind)


def _within(seconds: float, fn: Callable[[], Any]) -> Any:
    """fn's result or exception; a failure, not a hung run, when it blocks."""
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # handed to the test below
            box["error"] = exc

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still blocked after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box.get("result")


def _tls_site(tmp_path: Path) -> Path:
    ca = make_ca("ACME Root CA")
    data = yaml.safe_load(EXAMPLE.read_text())
    data["site"]["tls"] = write_tls(tmp_path, ca, *make_leaf(ca, [DOMAIN]))
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    return tmp_path


def _validate(site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "appliance_cli", "config", "validate", str(site)],
        capture_output=True, text=True, timeout=20, env=env, cwd=ROOT,
    )  # fmt: skip


TLS = {"certificate": "tls/runai.crt", "key": "tls/runai.key", "ca": "tls/org-ca.crt"}


def test_the_tls_site_validates(tmp_path: Path) -> None:
    """The site the test below breaks is valid as written."""
    assert _validate(_tls_site(tmp_path)).returncode == 0


@pytest.mark.parametrize(
    ("field", "kind"), [("key", k) for k in STRANGERS] + [("certificate", "fifo"), ("ca", "fifo")]
)
def test_config_validate_refuses_a_tls_file_that_is_not_a_regular_file(
    tmp_path: Path, field: str, kind: str
) -> None:
    site = _tls_site(tmp_path)
    _stranger(site / TLS[field], kind)
    done = _validate(site)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[0] == (
        f"error: {site / 'appliance.yml'}: site.tls.{field}: {TLS[field]}: cannot read it (not a regular file)"
    )
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_appliance_yml_that_is_not_a_regular_file_is_one_line(tmp_path: Path, kind: str) -> None:
    from appliance_cli.core import siteyaml

    target = tmp_path / "appliance.yml"
    _stranger(target, kind)
    with pytest.raises(ApplianceError) as exc:
        _within(10, lambda: siteyaml.read_text(target))
    assert exc.value.message == f"{target}: cannot read it (not a regular file)"
    assert exc.value.exit_code == 2


@pytest.mark.parametrize("kind", STRANGERS)
def test_known_hosts_that_is_not_a_regular_file_names_the_field(tmp_path: Path, kind: str) -> None:
    from appliance_cli.core import knownhosts
    from appliance_cli.core.siteconfig import load_site

    (tmp_path / "appliance.yml").write_text(EXAMPLE.read_text())
    cfg = load_site(tmp_path)
    path = cfg.resolve(cfg.ssh.known_hosts)
    path.parent.mkdir(parents=True, exist_ok=True)
    _stranger(path, kind)
    with pytest.raises(ApplianceError) as exc:
        _within(10, lambda: knownhosts.require_host_keys(cfg))
    assert exc.value.message == f"ssh.known_hosts: {path}: cannot read it (not a regular file)"
    assert exc.value.exit_code == 2


def test_known_hosts_not_there_yet_is_no_host_recorded(tmp_path: Path) -> None:
    from appliance_cli.core.knownhosts import recorded_hosts

    assert recorded_hosts(tmp_path / "known_hosts") == set()


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_bundle_key_that_is_not_a_regular_file_is_one_line(tmp_path: Path, kind: str) -> None:
    from appliance_cli.bundle.signing import load_private_key, load_public_key

    for load, what in ((load_public_key, "public"), (load_private_key, "private")):
        path = tmp_path / f"bundle.{what}"
        _stranger(path, kind)
        with pytest.raises(ApplianceError) as exc:
            _within(10, lambda p=path, f=load: f(p))  # type: ignore[misc]
        assert exc.value.message == f"{path}: cannot read {what} key: not a regular file"
        assert exc.value.exit_code == 4


def test_the_oidc_ca_that_is_not_a_regular_file_names_its_field(tmp_path: Path) -> None:
    from appliance_cli.core.researcher import _ca_pem
    from appliance_cli.core.siteconfig import load_site

    site = _tls_site(tmp_path)
    cfg = load_site(site)
    _stranger(site / "tls" / "org-ca.crt", "fifo")
    with pytest.raises(ApplianceError) as exc:
        _within(10, lambda: _ca_pem(cfg, site / "tls" / "org-ca.crt"))
    assert (
        exc.value.message
        == f"site.tls.ca: {site / 'tls' / 'org-ca.crt'}: cannot read it (not a regular file)"
    )
    assert exc.value.exit_code == 2


def test_read_regular_reads_a_file_and_follows_a_symlink_to_one(tmp_path: Path) -> None:
    from appliance_cli.fsutil import read_regular

    (tmp_path / "f").write_bytes(b"pem")
    (tmp_path / "link").symlink_to("f")
    assert read_regular(tmp_path / "link") == b"pem"
    with pytest.raises(OSError, match="larger than 2 bytes"):
        read_regular(tmp_path / "f", limit=2)
