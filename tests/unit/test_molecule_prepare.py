"""tests/molecule/lab.py prepare: a scenario starts from the snapshot of the state before its role.
Which snapshot it restores and which roles it then runs, with the lab's snapshot store, the runs
and the lab itself replaced by recorders (the lab drill is `make molecule`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ORDER = [
    "bundle_repo",
    "os_prereqs",
    "registry",
    "container_runtime",
    "kube_binaries",
    "control_plane",
    "node_join",
]


@pytest.fixture
def lab(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("molecule_lab", REPO / "tests/molecule/lab.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from appliance_cli.lab import snapshot
    from appliance_cli.lab.layout import LabLayout
    from appliance_cli.lab.state import LabState
    from tests._support import labsnap

    saved: set[tuple[str, str]] = set()
    log: list[Any] = []
    layout = SimpleNamespace(
        name="mol", site_dir=tmp_path, state_file=tmp_path / "state.json", cache_dir=tmp_path,
        nodes_dir=tmp_path / "nodes",
    )  # fmt: skip
    (tmp_path / "appliance.yml").write_text("site: {name: mol}\n")
    monkeypatch.setattr(LabLayout, "default", staticmethod(lambda: layout))
    monkeypatch.setattr(LabState, "load", staticmethod(lambda path: SimpleNamespace(count=2)))
    monkeypatch.setattr(labsnap, "tree_digest", lambda: "product")
    # a key names the tag list: what the snapshot holds (the real key hashes the bundle and base too)
    monkeypatch.setattr(labsnap, "key", lambda **kw: f"{kw['lab']}|{kw['args']}|{kw.get('product')}")
    monkeypatch.setattr(snapshot, "exists", lambda layout, name, key: (name, key) in saved)
    monkeypatch.setattr(snapshot, "others", lambda layout, name, key: [])
    monkeypatch.setattr(
        snapshot, "restore", lambda name, key, **kw: log.append(("restore", key.split("|")[1]))
    )

    def save(name: str, key: str, extra: dict[str, Any], boot: bool = True, **kw: Any) -> None:
        saved.add((name, key))
        log.append(("save", extra.get("roles")) if boot else ("save, left down", extra.get("roles")))

    monkeypatch.setattr(snapshot, "save", save)
    monkeypatch.setattr(
        mod, "_run_roles", lambda tags, registry_installed: log.append(("run", tags, registry_installed))
    )
    monkeypatch.setattr(mod.os, "sched_setaffinity", lambda pid, cpus: None)
    monkeypatch.setattr(mod, "_wait_ready", lambda ready=True: log.append(("ready" if ready else "api",)))
    # the site text is one of the key's inputs, which the recorder above leaves out
    monkeypatch.setattr(mod, "_site_text", lambda *a, **kw: "site: {name: mol}\n")
    monkeypatch.setattr(mod, "_base_image", lambda layout: tmp_path / "base.tar.zst")
    # up(): the commands it runs, and the install gate
    monkeypatch.setattr(mod, "appliance", lambda *args: log.append(("appliance", " ".join(args[:2]))))
    from appliance_cli.core import bundlegate, siteconfig

    monkeypatch.setattr(siteconfig, "load_site", lambda site_dir: "cfg")
    monkeypatch.setattr(bundlegate, "check", lambda cfg: SimpleNamespace(summary="gate", extravars={}))
    monkeypatch.setattr(mod, "KEY", tmp_path / "lab-signing")
    (tmp_path / "lab-signing.key").write_text("")
    monkeypatch.setattr(mod, "BUNDLES", tmp_path)
    return SimpleNamespace(
        prepare=mod.prepare, up=mod.up, save_next=mod.save_next, log=log, site_dir=tmp_path, saved=saved,
        mod=mod,
    )  # fmt: skip


def test_a_first_scenario_runs_every_role_before_it_and_saves_the_state(lab: Any) -> None:
    lab.prepare(ORDER[:3])
    assert lab.log == [("run", ORDER[:3], False), ("save", ORDER[:3])]


def test_the_next_scenario_starts_from_the_one_before_and_runs_only_the_role_between(lab: Any) -> None:
    lab.prepare(ORDER[:3])
    lab.log.clear()
    lab.prepare(ORDER[:5])  # kube_binaries' start: container_runtime and kube_binaries' own roles before it
    assert lab.log == [
        ("restore", repr(("prepare", *ORDER[:3]))),
        ("run", ORDER[3:5], True),
        ("save", ORDER[:5]),
    ]


def test_an_unchanged_state_is_restored_and_nothing_runs(lab: Any) -> None:
    lab.prepare(ORDER[:2])
    lab.log.clear()
    lab.prepare(ORDER[:2])
    assert lab.log == [("restore", repr(("prepare", *ORDER[:2])))]


def test_a_longer_run_is_never_a_start_and_the_roles_before_the_registry_run_early(lab: Any) -> None:
    lab.prepare(ORDER[:4])
    lab.log.clear()
    lab.prepare(ORDER[:2])  # a state before the longer one: from scratch, without the registry
    assert lab.log == [("run", ORDER[:2], False), ("save", ORDER[:2])]


def test_nothing_to_prepare_touches_nothing(lab: Any) -> None:
    lab.prepare([])
    assert lab.log == []


def test_a_changed_product_finds_no_snapshot(lab: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests._support import labsnap

    lab.prepare(ORDER[:3])
    monkeypatch.setattr(labsnap, "tree_digest", lambda: "a role changed")
    lab.log.clear()
    lab.prepare(ORDER[:4])
    assert lab.log == [("run", ORDER[:4], False), ("save", ORDER[:4])]


def test_a_state_with_kubernetes_is_used_once_its_api_answers_and_with_the_pod_network_every_node_ready(
    lab: Any,
) -> None:
    # restored or saved, the nodes booted from their disks: the API server answers again first and,
    # with flannel, each kubelet posts Ready again (before it, every node is NotReady by design)
    lab.prepare(ORDER[:6])
    assert lab.log == [("run", ORDER[:6], False), ("save", ORDER[:6]), ("api",)]
    lab.log.clear()
    lab.prepare(ORDER[:7])
    assert lab.log == [
        ("restore", repr(("prepare", *ORDER[:6]))), ("api",), ("run", ORDER[6:7], True), ("save", ORDER[:7]), ("api",)
    ]  # fmt: skip
    flannel = [*ORDER, "node_roles", "cni_flannel"]
    lab.log.clear()
    lab.prepare(flannel)
    assert lab.log == [
        ("restore", repr(("prepare", *ORDER))), ("api",), ("run", flannel[7:], True), ("save", flannel), ("ready",)
    ]  # fmt: skip
    lab.log.clear()
    lab.prepare(flannel)
    assert lab.log == [("restore", repr(("prepare", *flannel))), ("ready",)]


def _create_then_prepare(
    lab: Any, tags: list[str], monkeypatch: pytest.MonkeyPatch, installed: bool = False
) -> list[Any]:
    """Molecule's create and prepare for a scenario whose prepare is `tags`: what they did, the
    bundle's build and signing left out."""
    monkeypatch.setenv("MOLECULE_LAB_PREPARE", ",".join(tags))
    lab.log.clear()
    lab.up(2, installed=installed)
    lab.prepare(tags)
    return [e for e in lab.log if not (e[0] == "appliance" and e[1].startswith("bundle "))]


def test_create_boots_the_lab_from_the_prepared_snapshot_and_prepare_then_restores_nothing(
    lab: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab.prepare(ORDER[:6])
    assert _create_then_prepare(lab, ORDER[:6], monkeypatch) == [
        ("restore", repr(("prepare", *ORDER[:6]))), ("api",)
    ]  # fmt: skip
    assert not (lab.site_dir / lab.mod.START_FILE).exists()  # consumed: the next prepare restores


def test_create_boots_from_the_scenario_before_and_prepare_runs_only_the_role_between(
    lab: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab.prepare(ORDER[:6])
    assert _create_then_prepare(lab, ORDER[:7], monkeypatch) == [
        ("restore", repr(("prepare", *ORDER[:6]))), ("api",), ("run", ORDER[6:7], True), ("save", ORDER[:7]), ("api",)
    ]  # fmt: skip


def test_without_a_snapshot_create_brings_a_fresh_lab_up_and_prepare_runs_every_role(
    lab: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _create_then_prepare(lab, ORDER[:3], monkeypatch) == [
        ("appliance", "lab up"), ("run", ORDER[:3], False), ("save", ORDER[:3])
    ]  # fmt: skip


def test_a_prepare_run_again_after_create_restores_again(lab: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    lab.prepare(ORDER[:2])
    _create_then_prepare(lab, ORDER[:2], monkeypatch)
    lab.log.clear()
    lab.prepare(ORDER[:2])  # `molecule prepare` once more: the lab may have changed since create
    assert lab.log == [("restore", repr(("prepare", *ORDER[:2])))]


def test_an_installed_scenario_boots_from_the_installed_snapshot_or_installs_and_saves_it(
    lab: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOLECULE_LAB_PREPARE", "")
    assert _create_then_prepare(lab, [], monkeypatch, installed=True) == [
        ("appliance", "lab up"), ("appliance", "install --site"), ("save", None), ("ready",)
    ]  # fmt: skip
    assert _create_then_prepare(lab, [], monkeypatch, installed=True) == [
        ("restore", repr(("--skip-diagnose",))), ("ready",)
    ]  # fmt: skip
    assert not (lab.site_dir / lab.mod.START_FILE).exists()  # no prepare of lab.py's to read it


def test_a_passed_scenario_saves_the_next_ones_start_left_down_and_that_one_then_runs_no_role(
    lab: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # control_plane's scenario passed verify: node_join's start (ORDER[:6]) is saved from its lab
    monkeypatch.setenv("MOLECULE_LAB_PREPARE", ",".join(ORDER[:5]))
    lab.save_next("control_plane")
    assert lab.log == [("save, left down", ORDER[:6])]
    assert _create_then_prepare(lab, ORDER[:6], monkeypatch) == [
        ("restore", repr(("prepare", *ORDER[:6]))), ("api",)
    ]  # fmt: skip
    lab.log.clear()
    monkeypatch.setenv("MOLECULE_LAB_PREPARE", ",".join(ORDER[:5]))
    lab.save_next("control_plane")  # the same inputs again: the snapshot is there, nothing is saved
    assert lab.log == []


def _running(monkeypatch: pytest.MonkeyPatch, *running: bool) -> None:
    from appliance_cli.lab import lifecycle

    monkeypatch.setattr(lifecycle, "status", lambda: [SimpleNamespace(running=r) for r in running])


def test_the_next_scenario_when_it_alone_starts_there_takes_the_lab_over_up_not_saved_nor_booted(
    lab: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _running(monkeypatch, True, True)
    monkeypatch.setattr(lab.mod, "appliance", lambda *args: lab.log.append(("appliance", " ".join(args))))
    (lab.site_dir / "state.json").write_text("{}")
    monkeypatch.setenv("MOLECULE_LAB_PREPARE", ",".join(ORDER[:5]))
    monkeypatch.setenv(lab.mod.HAND_TO_ENV, "node_join")  # the lane's next: it alone starts from ORDER[:6]
    lab.save_next("control_plane")
    assert lab.log == [] and not lab.saved
    lab.mod.down()  # destroy: the lab stays up
    assert lab.log == []
    assert "stays up: handed over to node_join" in capsys.readouterr().out
    steps = _create_then_prepare(lab, ORDER[:6], monkeypatch)
    assert steps == []  # no boot, no restore, no role, no save
    out = capsys.readouterr().out
    assert "taken over, up" in out and "nothing to run" in out
    assert not (lab.site_dir / lab.mod.HANDOVER_FILE).exists()
    assert not (lab.site_dir / lab.mod.START_FILE).exists()


def test_a_lab_handed_over_is_not_taken_when_it_is_not_this_scenarios_start_or_a_node_is_down(
    lab: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lab.prepare(ORDER[:6])  # node_join's start has a snapshot
    monkeypatch.setenv("MOLECULE_LAB_PREPARE", ",".join(ORDER[:5]))
    monkeypatch.setenv(lab.mod.HAND_TO_ENV, "node_join")
    _running(monkeypatch, True, False)
    lab.save_next("control_plane")
    assert _create_then_prepare(lab, ORDER[:6], monkeypatch) == [
        ("restore", repr(("prepare", *ORDER[:6]))), ("api",)
    ]  # fmt: skip
    assert "not taken (not every node of it runs)" in capsys.readouterr().out
    _running(monkeypatch, True, True)
    monkeypatch.setenv("MOLECULE_LAB_PREPARE", ",".join(ORDER[:5]))
    lab.save_next("control_plane")
    monkeypatch.setattr(labsnap_mod(), "tree_digest", lambda: "a role changed since")
    steps = _create_then_prepare(lab, ORDER[:6], monkeypatch)
    assert "not taken (it is in state" in capsys.readouterr().out
    assert steps[0][0] != "restore" and ("run", ORDER[:6], False) in steps  # the stale snapshot is not used
    assert not (lab.site_dir / lab.mod.HANDOVER_FILE).exists()


@pytest.mark.parametrize("record", ["[1, 2]", '"name"', "null"])
def test_a_hand_over_record_that_is_json_but_not_a_mapping_is_no_record(
    lab: Any, record: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lab.prepare(ORDER[:6])
    monkeypatch.setenv("MOLECULE_LAB_PREPARE", ",".join(ORDER[:5]))
    _running(monkeypatch, True, True)
    (lab.site_dir / lab.mod.HANDOVER_FILE).write_text(record + "\n")
    assert _create_then_prepare(lab, ORDER[:6], monkeypatch) == [
        ("restore", repr(("prepare", *ORDER[:6]))), ("api",)
    ]  # fmt: skip
    assert "not taken (molecule-handover.json holds no record)" in capsys.readouterr().out
    assert not (lab.site_dir / lab.mod.HANDOVER_FILE).exists()


def test_a_start_several_scenarios_share_is_saved_even_with_the_first_of_them_next(
    lab: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    flannel = [*ORDER, "node_roles"]
    monkeypatch.setenv("MOLECULE_LAB_PREPARE", ",".join(flannel))
    monkeypatch.setenv(lab.mod.HAND_TO_ENV, "gpu_operator")  # helm and storage_nfs start there too
    lab.save_next("cni_flannel")
    assert lab.log == [("save, left down", [*flannel, "cni_flannel"])]
    assert not (lab.site_dir / lab.mod.HANDOVER_FILE).exists()


def labsnap_mod() -> Any:
    from tests._support import labsnap

    return labsnap


def test_a_state_no_scenario_starts_from_is_not_saved(lab: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    flannel = [*ORDER, "node_roles", "cni_flannel"]
    monkeypatch.setenv("MOLECULE_LAB_PREPARE", ",".join(flannel))
    lab.save_next("gpu_operator")  # nothing starts from the GPU Operator's lab
    lab.save_next("helm")  # scheduler_stack starts from helm's
    assert lab.log == [("save, left down", [*flannel, "helm"])]


def test_create_without_a_snapshot_first_purges_what_a_killed_run_left(
    lab: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (lab.site_dir / "nodes").mkdir()  # a lab a killed scenario left: no destroy comes before create
    assert _create_then_prepare(lab, ORDER[:1], monkeypatch)[:2] == [
        ("appliance", "lab down"), ("appliance", "lab up")
    ]  # fmt: skip


def test_kube_upgrades_lab_is_saved_and_chart_upgrade_boots_from_it_upgraded(
    lab: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(lab.mod, "_old_bundle", lambda version: lab.site_dir / f"lab-{version}")
    monkeypatch.setenv("MOLECULE_LAB_PREPARE", "")
    monkeypatch.setenv("MOLECULE_LAB_OLD", "v1.23.16")
    monkeypatch.setenv("MOLECULE_LAB_LEAVES", "kubernetes")  # kube_upgrade's scenario
    lab.save_next("kube_upgrade")
    assert lab.log == [("save, left down", ["kubernetes"])]
    lab.log.clear()
    monkeypatch.setenv("MOLECULE_LAB_LEAVES", "")  # chart_upgrade's: its prepare upgrades the nodes
    monkeypatch.setenv("MOLECULE_UPGRADE_PREPARE", "kubernetes")
    lab.up(2, old="v1.23.16", installed=True)
    upgraded = [e for e in lab.log if e[0] == "restore"]
    assert len(upgraded) == 1 and "upgrade.yml" in upgraded[0][1] and ("ready",) in lab.log
    lab.mod.new_stick()  # prepare: nothing to put on the stick, nothing to upgrade
    assert "by create: upgraded" in capsys.readouterr().out
    assert not (lab.site_dir / lab.mod.START_FILE).exists()
    lab.log.clear()
    monkeypatch.setenv("MOLECULE_UPGRADE_PREPARE", "")  # kube_upgrade's own create: the installed lab
    lab.up(2, old="v1.23.16", installed=True)
    assert not [e for e in lab.log if e[0] == "restore" and "upgrade.yml" in e[1]]
    assert not (lab.site_dir / lab.mod.START_FILE).exists()


def test_destroy_keeps_the_trees_of_a_lab_made_from_a_snapshot_and_purges_any_other(
    lab: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from appliance_cli.lab.snapshot import RESTORED

    monkeypatch.setattr(lab.mod, "appliance", lambda *args: lab.log.append(("appliance", " ".join(args))))
    nodes = lab.site_dir / "nodes"
    nodes.mkdir()
    lab.mod.down()  # a lab of its own making: purged
    assert lab.log == [("appliance", "lab down --purge")]
    lab.log.clear()
    (nodes / RESTORED).write_text("{}")  # the nodes' trees were made from a snapshot
    lab.mod.down()  # save-next left it down: nothing to do
    assert lab.log == []
    (lab.site_dir / "state.json").write_text("{}")  # booted: stopped, its trees kept for the next restore
    lab.mod.down()
    assert lab.log == [("appliance", "lab down")]
