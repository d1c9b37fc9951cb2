"""core/upgradestate.py: the upgrade's state file on the master, read after `upgrade apply`, is
checked before the CLI prints it; run_on is replaced, no SSH."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance_cli.core import upgradestate
from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.errors import ApplianceError

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "appliance.yml"


@pytest.fixture
def cfg(tmp_path: Path) -> SiteConfig:
    (tmp_path / "appliance.yml").write_text(EXAMPLE.read_text())
    return load_site(tmp_path / "appliance.yml")


def _state(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    def run_on(cfg, node, command, timeout=60):  # type: ignore[no-untyped-def]
        assert node.name == "master1" and command == ["cat", "--", upgradestate.STATE_FILE]
        return text

    monkeypatch.setattr(upgradestate, "run_on", run_on)


def test_the_applied_state_is_read(cfg, monkeypatch) -> None:
    state = {
        "snapshot": "/var/lib/appliance/upgrade/etcd.db",
        "charts": {"ns/r": "c 1 -> 2"},
        "phase": "done",
    }
    _state(monkeypatch, json.dumps(state))
    assert upgradestate.applied(cfg) == upgradestate.Applied(state["snapshot"], {"ns/r": "c 1 -> 2"})
    _state(monkeypatch, "{}")
    assert upgradestate.applied(cfg) == upgradestate.Applied("", {})


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "state.json on master1: not a JSON object"),
        ("[1]", "state.json on master1: not a JSON object"),
        ("{", "state.json: no JSON in its answer"),
        ('{"snapshot": 3}', "state.json on master1: snapshot or charts malformed"),
        ('{"charts": {"a": 1}}', "state.json on master1: snapshot or charts malformed"),
    ],
)
def test_a_malformed_state_is_one_line(cfg, monkeypatch, text, message) -> None:
    _state(monkeypatch, text)
    with pytest.raises(ApplianceError) as e:
        upgradestate.applied(cfg)
    assert e.value.message == f"/var/lib/appliance/upgrade/{message}"
