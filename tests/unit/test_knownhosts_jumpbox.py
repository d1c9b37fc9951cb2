"""`appliance hosts trust` covers the jumpbox too (the install reaches it to put the researcher CLI
there): it is missing until recorded, scanned with its own ssh user, recorded by name and address."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import yaml

from appliance_cli.cli.main import main
from appliance_cli.core import knownhosts
from appliance_cli.core.siteconfig import load_site

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((REPO / "inventories" / "example" / "appliance.yml").read_text())
KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def write_site(tmp_path: Path) -> Path:
    data = copy.deepcopy(EXAMPLE)
    data["scheduler"]["jumpbox"] = {"name": "jump1", "address": "10.99.0.40", "user": "research"}
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    lines = [f"{n['name']},{n['address']} ssh-ed25519 {KEY}" for n in data["nodes"]]
    (tmp_path / "known_hosts").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_the_jumpbox_is_missing_until_recorded(tmp_path):
    cfg = load_site(write_site(tmp_path))
    assert [h.name for h in knownhosts.missing_nodes(cfg)] == ["jump1"]
    assert [h.name for h in knownhosts.ssh_hosts(cfg)][-1] == "jump1"


def test_trust_scans_the_jumpbox_with_its_user_and_records_it(tmp_path, monkeypatch, capsys):
    site = write_site(tmp_path)
    seen: list[list[str]] = []

    def fake_run(argv, **kwargs):
        seen.append(argv)
        scratch = next(a.split("=", 1)[1] for a in argv if a.startswith("UserKnownHostsFile="))
        Path(scratch).write_text(f"10.99.0.40 ssh-ed25519 {KEY}\n")
        return subprocess.CompletedProcess(argv, 255, b"", b"")

    monkeypatch.setattr(knownhosts.subprocess, "run", fake_run)
    assert main(["hosts", "trust", "--site", str(site), "--yes"]) == 0
    assert len(seen) == 1 and "research@10.99.0.40" in seen[0]
    assert f"jump1,10.99.0.40 ssh-ed25519 {KEY}" in (site / "known_hosts").read_text()
    assert "jump1 (10.99.0.40): ssh-ed25519 SHA256:" in capsys.readouterr().out
    assert main(["hosts", "trust", "--site", str(site), "--yes"]) == 0
    assert "nodes and the jumpbox already have a recorded host key" in capsys.readouterr().out


def test_a_corrupt_byte_in_known_hosts_does_not_crash_the_reading(tmp_path):
    site = write_site(tmp_path)
    kh = site / "known_hosts"
    kh.write_bytes(kh.read_bytes() + b"bad\xff,10.99.0.99 ssh-ed25519 " + KEY.encode() + b"\n")
    names = knownhosts.recorded_hosts(kh)
    assert {"master1", "gpu1", "gpu2"} <= names
