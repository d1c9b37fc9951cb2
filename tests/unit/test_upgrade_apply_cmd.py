"""`appliance upgrade apply` before anything runs: nothing to do ends there (rc 0, no playbook),
and without --yes and without a terminal to ask on it refuses in one line (rc 2). The plan itself
(cluster reads over ssh) is replaced: what is tested is what the command does with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance_cli.cli import upgrade_cmd
from appliance_cli.cli.main import main
from appliance_cli.core import upgradeplan, upgradestate
from appliance_cli.core.bundlegate import GateResult

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "appliance.yml"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "appliance.yml").write_text(EXAMPLE.read_text())

    def no_playbook(*a, **k):
        raise AssertionError("a playbook ran")

    monkeypatch.setattr(upgrade_cmd, "run_playbook", no_playbook)
    return tmp_path


def _plan(monkeypatch: pytest.MonkeyPatch, plan: upgradeplan.Plan) -> None:
    monkeypatch.setattr(upgrade_cmd, "_verified_plan", lambda cfg, args: (GateResult({}, "verified"), plan))


def test_nothing_to_upgrade_ends_before_any_run(site, monkeypatch, capsys):
    _plan(monkeypatch, upgradeplan.Plan([], [], []))
    assert main(["upgrade", "apply", "--site", str(site), "--bundle", str(site), "--yes"]) == 0
    assert "nothing to upgrade" in capsys.readouterr().out
    assert (site / "appliance.yml").read_text() == EXAMPLE.read_text()


def test_without_yes_and_without_a_terminal_it_refuses(site, monkeypatch, capsys):
    plan = upgradeplan.Plan([("kubernetes", "v1.23.16", "v1.23.17")], ["..."], ["gpu1"], ["v1.23.17"])
    _plan(monkeypatch, plan)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["upgrade", "apply", "--site", str(site), "--bundle", str(site)]) == 2
    err = capsys.readouterr().err
    assert "error: not upgrading without confirmation" in err and "--yes" in err
    assert (site / "appliance.yml").read_text() == EXAMPLE.read_text()


def test_each_nodes_containerd_is_asked_with_dpkg_and_docker_sites_are_not(site, monkeypatch):
    from appliance_cli.core.siteconfig import load_site

    asked = []

    def run_on(cfg, node, command, timeout=60):
        asked.append((node.name, command))
        return {"master1": "1.6.20~ds1-1+deb12u2\nbookworm\n", "gpu1": "\nbookworm\n"}.get(
            node.name, "x\nfocal\n"
        )

    monkeypatch.setattr(upgradestate, "run_on", run_on)
    cfg = load_site(site / "appliance.yml")
    assert upgradestate.runtimes(cfg) == {
        "master1": ("bookworm", "1.6.20~ds1-1+deb12u2"),
        "gpu1": ("bookworm", ""),
        "gpu2": ("focal", "x"),
    }
    assert sorted(asked) == [(n, upgradeplan.RUNTIME_PROBE) for n in ("gpu1", "gpu2", "master1")]
    cfg.kubernetes.container_runtime = "docker"
    asked.clear()
    assert upgradestate.runtimes(cfg) == {} and asked == []
