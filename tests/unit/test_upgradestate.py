"""core/upgradestate.py: the upgrade's state file on the master, read after `upgrade apply`
(core/opstate.py's layout: kube_upgrade's and chart_upgrade's keys), is checked before the CLI
prints it; run_on is replaced, no SSH."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance_cli.core import upgradestate
from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.errors import ApplianceError, StateFileError

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "appliance.yml"
FILE = "/var/lib/appliance/upgrade/state.json"


@pytest.fixture
def cfg(tmp_path: Path) -> SiteConfig:
    (tmp_path / "appliance.yml").write_text(EXAMPLE.read_text())
    return load_site(tmp_path / "appliance.yml")


def _state(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    def run_on(cfg, node, command, timeout=60):  # type: ignore[no-untyped-def]
        # argv: the path is the shell's $1, never part of its text
        assert node.name == "master1" and command[:2] == ["sh", "-c"] and command[3:] == ["sh", FILE]
        return text

    monkeypatch.setattr(upgradestate, "run_on", run_on)


def test_the_applied_state_is_read(cfg, monkeypatch) -> None:
    kube = {
        "target": "v1.23.17",
        "done": ["master1"],
        "draining": "",
        "snapshot": "/var/lib/appliance/etcd.db",
    }
    charts = {"target": "v1.23.17", "charts": {"ns/r": "c 1 -> 2"}, "charts_upgrading": ""}
    _state(monkeypatch, json.dumps({"schema": 1, "kube_upgrade": kube, "chart_upgrade": charts}))
    assert upgradestate.applied(cfg) == upgradestate.Applied(kube["snapshot"], {"ns/r": "c 1 -> 2"})
    # charts an earlier upgrade recorded (another target) are not this one's
    _state(
        monkeypatch,
        json.dumps({"schema": 1, "kube_upgrade": kube, "chart_upgrade": {**charts, "target": "v1.22.17"}}),
    )
    assert upgradestate.applied(cfg) == upgradestate.Applied(kube["snapshot"], {})
    for empty in ("", "{}", '{"schema": 1}'):
        _state(monkeypatch, empty)
        assert upgradestate.applied(cfg) == upgradestate.Applied("", {})


def test_the_flat_state_of_the_toolkit_before_the_schema_is_read(cfg, monkeypatch) -> None:
    legacy = {"target": "v1.23.17", "done": ["master1"], "draining": "", "snapshot": "/s.db",
              "charts": {"ns/r": "c 1 -> 2"}, "charts_upgrading": ""}  # fmt: skip
    _state(monkeypatch, json.dumps(legacy))
    assert upgradestate.applied(cfg) == upgradestate.Applied("/s.db", {"ns/r": "c 1 -> 2"})
    state = upgradestate.read_state(cfg)
    assert state.schema_ == 0 and state.kube_upgrade.done == ["master1"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1]", "not a JSON object"),
        ("{", "not JSON"),
        ('{"schema": 2}', "schema 2 is newer than this toolkit's (1)"),
        (
            '{"schema": 1, "kube_upgrade": {"snapshot": 3}}',
            "kube_upgrade.snapshot: Input should be a valid string",
        ),
        (
            '{"schema": 1, "chart_upgrade": {"charts": {"a": 1}}}',
            "chart_upgrade.charts.a: Input should be a valid string",
        ),
        ('{"snapshot": 3}', "kube_upgrade.snapshot: Input should be a valid string"),  # legacy, malformed
    ],
)
def test_a_malformed_state_is_one_line_naming_file_and_node(cfg, monkeypatch, text, message) -> None:
    _state(monkeypatch, text)
    with pytest.raises(StateFileError) as e:
        upgradestate.applied(cfg)
    assert isinstance(e.value, ApplianceError) and e.value.message == f"{FILE} on master1: {message}"
    assert e.value.hint and "\n" not in e.value.message
