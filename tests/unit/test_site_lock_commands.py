"""Every command that changes a node or the cluster takes the site lock (issue 28): a `node drain`
made while `upgrade apply` runs was undone by the upgrade's uncordon. With the site's lock held,
drain, uncordon, diagnose and acceptance exit 9 naming the holder before any SSH; `hosts trust`
takes the controller's lock (the master's needs the keys it records). The master's lock session
has keepalives. support-bundle takes none on purpose: it is what one runs while a run hangs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.cli.main import main
from appliance_cli.core import sitelock
from appliance_cli.core.siteconfig import load_site
from tests._support.paths import EXAMPLE

KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    for n, node in enumerate(data["nodes"]):
        node["address"] = f"127.0.0.{n + 1}"  # never the example's real addresses
    data["network"]["node_cidr"] = "127.0.0.0/8"
    data["network"]["dns_servers"] = data["network"]["ntp_servers"] = []
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    lines = [f"{n['name']},{n['address']} ssh-ed25519 {KEY}" for n in data["nodes"]]
    (tmp_path / "known_hosts").write_text("\n".join(lines) + "\n")

    def refuse(*a: Any, **k: Any) -> None:
        raise AssertionError(f"no process may run while the site is held: {a}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    return tmp_path


@pytest.mark.parametrize(
    "argv, what",
    [
        (["node", "drain", "--site", "{site}", "gpu1", "--yes"], "node drain gpu1"),
        (["node", "uncordon", "--site", "{site}", "gpu1"], "node uncordon gpu1"),
        (["diagnose", "{site}", "--quick"], "diagnose"),
        (["acceptance", "--site", "{site}"], "acceptance"),
        (["hosts", "trust", "--site", "{site}", "--yes"], "hosts trust"),
    ],
)
def test_a_held_site_refuses_the_command_before_any_ssh(
    site: Path, capsys, argv: list[str], what: str
) -> None:
    with sitelock.controller_lock(site, "upgrade apply"):
        assert main([a.replace("{site}", str(site)) for a in argv]) == 9, what
    err = capsys.readouterr().err
    assert f"{site}: another run holds this site (`appliance upgrade apply`, pid {os.getpid()}" in err


def test_the_lock_is_taken_with_the_commands_own_name(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # released with the run: the next command takes it (and then meets the refused SSH of the fixture)
    with sitelock.controller_lock(site, "x"):
        pass
    held = []

    def master_lock(cfg: Any) -> Any:
        held.append((site / sitelock.CONTROLLER_LOCK).read_text())
        raise sitelock.SiteBusy("seen")

    monkeypatch.setattr(sitelock, "master_lock", master_lock)
    assert main(["node", "drain", "--site", str(site), "gpu1", "--yes"]) == 9
    assert held and held[0].startswith(f"`appliance node drain gpu1`, pid {os.getpid()}")


def test_the_master_lock_session_has_keepalives(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    class Proc:
        returncode = 0

        def __init__(self, argv: list[str], **kw: Any) -> None:
            seen.append(argv)
            import io

            self.stdout = io.StringIO(sitelock.LOCKED + "\n")
            self.stdin = io.StringIO()

        def wait(self, timeout: float) -> int:
            return 0

    monkeypatch.setattr(sitelock.subprocess, "Popen", Proc)
    with sitelock.master_lock(load_site(site)):
        pass
    argv = seen[0]
    assert argv[0] == "ssh"
    opts = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-o"}
    assert {"ServerAliveInterval=15", "ServerAliveCountMax=4", "StrictHostKeyChecking=yes"} <= opts
