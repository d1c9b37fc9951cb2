"""`appliance support-bundle` (appliance_cli/core/supportbundle.py): what the archive holds, and that
no secret the site holds gets into it, whatever shape it arrives in. The nodes are a fake runner
here (the lab e2e reads real journals); the secrets are the shapes a real site produces."""

from __future__ import annotations

import secrets
import tarfile
from pathlib import Path

import pytest
import yaml

from appliance_cli.core import supportbundle
from appliance_cli.core.siteconfig import load_site
from appliance_cli.errors import Unreachable

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "appliance.yml"
PULL_PASSWORD = secrets.token_urlsafe(24)  # as registry_auth makes it
ADMIN_PASSWORD = secrets.token_urlsafe(18)
RESEARCHER_PASSWORD = "alice-" + secrets.token_hex(8)
TOKEN = "k3x9qa.0123456789abcdef"
KEY = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB" + secrets.token_hex(20) + "\n-----END EC PRIVATE KEY-----"


@pytest.fixture
def site(tmp_path: Path):
    data = yaml.safe_load(EXAMPLE.read_text())
    for n, node in enumerate(data["nodes"]):
        node["address"] = f"127.0.0.{n + 1}"  # never the example's real addresses
    data["network"]["node_cidr"] = "127.0.0.0/8"
    data["network"]["dns_servers"] = data["network"]["ntp_servers"] = []
    data["researcher_registry"] = {
        "address": "master1:5001",
        "users": [{"name": "alice", "password_file": "alice.pw"}],
    }
    (tmp_path / "alice.pw").write_text(RESEARCHER_PASSWORD + "\n")
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    run = tmp_path / "runs" / "20261124-101010-site"
    (run / "artifacts" / "x").mkdir(parents=True)
    (run / "artifacts" / "x" / "stdout").write_text(
        f"TASK [node_join] ok\nkubeadm join 10.0.0.1:6443 --token {TOKEN}\n"
    )
    (run / "env").mkdir()
    (run / "env" / "ssh_key").write_text(KEY)  # ansible-runner's env/: never collected
    return load_site(tmp_path)


def _runner(down: set[str]):
    def run(cfg, node, command: list[str], timeout: int) -> str:
        if node.name in down:
            raise Unreachable(f"{node.name} ({node.address}): SSH cannot connect: Connection refused")
        if command == supportbundle.MASTER_SECRETS_COMMAND:
            return f"{PULL_PASSWORD}\n{ADMIN_PASSWORD}\n"
        if "journalctl" in command:
            return (
                f"kubelet[1]: bootstrap token {TOKEN} used\n"
                f"registry[2]: auth ok for appliance-pull password={PULL_PASSWORD}\n"
                f"curl https://admin:{ADMIN_PASSWORD}@runai.example/api\n"
                f"someone echoed {RESEARCHER_PASSWORD} by mistake\n"
                f"Authorization: Bearer eyJhbGciOi.{secrets.token_hex(10)}\n"
                f"{KEY}\n"
            )
        return f"{node.name}: output of {command[0]}\n"

    return run


def _archive(path: Path) -> dict[str, str]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_no_secret_of_the_site_gets_into_the_archive(site, tmp_path):
    res = supportbundle.collect(site, tmp_path / "out", _runner(set()), now=lambda: 1_790_000_000)
    assert res.path.name == "appliance-support-acme-ai-lab-20260921-141320.tar.gz"
    assert res.path.stat().st_mode & 0o777 == 0o600
    files = _archive(res.path)
    blob = "\n".join(files.values())
    for secret in (PULL_PASSWORD, ADMIN_PASSWORD, RESEARCHER_PASSWORD, TOKEN, "MHcCAQEEIB", "eyJhbGciOi."):
        assert secret not in blob, secret
    journal = files["support/nodes/master1/journal.txt"]
    assert journal.count(supportbundle.REDACTED) >= 6
    assert "kubelet[1]: bootstrap token <redacted> used" in journal  # the context stays readable


def test_the_archive_holds_what_support_reads(site, tmp_path):
    res = supportbundle.collect(site, tmp_path, _runner(set()))
    files = _archive(res.path)
    names = set(files)
    for node in site.nodes:
        assert {f"support/nodes/{node.name}/versions.txt", f"support/nodes/{node.name}/journal.txt"} <= names
    assert (
        "support/nodes/master1/kubectl-pods.txt" in names
        and "support/nodes/gpu1/kubectl-pods.txt" not in names
    )
    assert "support/runs/20261124-101010-site/artifacts/x/stdout" in names
    assert not [n for n in names if "/env/" in n]  # ansible-runner's env/ (ssh key, passwords) stays out
    cfg = yaml.safe_load(files["support/site/appliance.yml"])
    assert (
        cfg["site"]["name"] == "acme-ai-lab"
        and cfg["researcher_registry"]["users"][0]["password_file"] == "alice.pw"
    )
    assert files["support/versions.txt"].startswith("appliance ")


def test_an_unreachable_node_is_noted_not_fatal(site, tmp_path):
    res = supportbundle.collect(site, tmp_path, _runner({"gpu2"}))
    assert res.unreachable == {"gpu2": "gpu2 (127.0.0.3): SSH cannot connect: Connection refused"}
    files = _archive(res.path)
    assert files["support/nodes/gpu2/UNREACHABLE.txt"].startswith("gpu2 (127.0.0.3)")
    assert "support/nodes/gpu1/journal.txt" in files


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ('{"password": "hunter2xyz", "user": "u"}', '{"password": "<redacted>", "user": "u"}'),
        ("registry_pull_password: s3cr3tvalue", "registry_pull_password: <redacted>"),
        ("client-key-data: LS0tLS1CRUdJTg==", "client-key-data: <redacted>"),
        ("https://bob:pa55word@host/x", "https://bob:<redacted>@host/x"),
        ("certificate-authority-data: LS0tQ0E=", "certificate-authority-data: LS0tQ0E="),  # public
        ("tokens: 3", "tokens: 3"),
    ],
)
def test_secret_shapes(text, kept):
    assert supportbundle.Scrubber()(text) == kept


def test_a_password_file_that_is_not_utf8_does_not_crash_the_collection(site, tmp_path):
    (tmp_path / "alice.pw").write_bytes(b"caf\xe9-" + RESEARCHER_PASSWORD.encode() + b"\n")
    res = supportbundle.collect(site, tmp_path / "out", _runner(set()))
    assert "support/nodes/master1/journal.txt" in _archive(res.path)
