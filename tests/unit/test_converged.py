"""A no-op install (core/converged.py and the node's side, core/checks/statedigest.py): what the
state digests see and what they cannot, the record written after a full run that succeeded and
forgotten by any other run, the reasons the roles run, named per node and part, and the install
that runs no role when nothing changed. The nodes' answers are faked here (no SSH from unit
tests); tests/e2e/test_install.py reads a lab's nodes."""

# ruff: noqa: F811  (the fixtures site and calls come from test_install_diagnose)
from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from appliance_cli.cli import install_cmd
from appliance_cli.cli.main import main
from appliance_cli.content import roles_dir
from appliance_cli.core import converged
from appliance_cli.core.remote import RemoteFailed
from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.errors import ApplianceError, Unreachable
from appliance_cli.runner.events import RunResult
from tests.unit.test_install_diagnose import INSTALL, calls, site  # noqa: F401 (fixtures)
from tests.unit.test_install_service import FakeRunner

STATEDIGEST = Path(converged.__file__).parent / "checks" / "statedigest.py"


@pytest.fixture(scope="module")
def probe() -> ModuleType:
    """The node's script, loaded as a module (it runs as `python3 - SPEC` on a node)."""
    spec = importlib.util.spec_from_file_location("statedigest", STATEDIGEST)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_node_script_is_python_3_8_and_the_standard_library_only() -> None:
    """It runs on the node's python3 (Ubuntu 20.04: 3.8), before anything of ours is there."""
    tree = ast.parse(STATEDIGEST.read_text(), feature_version=(3, 8))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported and imported <= set(sys.stdlib_module_names), imported


def test_a_content_tree_sees_a_byte_a_mode_and_a_link_and_never_follows_it(probe, tmp_path: Path) -> None:
    root = tmp_path / "etc"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "config.toml").write_text("a = 1\n")
    outside = tmp_path / "outside"
    outside.write_text("x")
    (root / "link").symlink_to(outside)
    first = probe.tree(str(root), "content")
    assert probe.tree(str(root), "content") == first  # read again, unchanged
    outside.write_text("y")  # what a link points at is not under the tree
    assert probe.tree(str(root), "content") == first
    (root / "sub" / "config.toml").write_text("a = 2\n")
    second = probe.tree(str(root), "content")
    assert second != first
    (root / "sub" / "config.toml").chmod(0o600)
    assert probe.tree(str(root), "content") != second
    (root / "link").unlink()
    (root / "link").symlink_to(root / "sub")
    assert probe.tree(str(root), "content") not in (first, second)


def test_a_stat_tree_sees_size_and_mtime_not_the_bytes_of_a_file_that_kept_both(
    probe, tmp_path: Path
) -> None:
    """Its limit, said in TREES' comment: the bundle copy and binaries are read by size and mtime."""
    blob = tmp_path / "www" / "blob"
    blob.parent.mkdir()
    blob.write_bytes(b"abcd")
    st = blob.stat()
    first = probe.tree(str(blob.parent), "stat")
    blob.write_bytes(b"abce")
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert probe.tree(str(blob.parent), "stat") == first
    blob.write_bytes(b"abcde")
    assert probe.tree(str(blob.parent), "stat") != first


def test_a_file_root_and_an_absent_root_have_digests_of_their_own(probe, tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    first = probe.tree(str(hosts), "content")
    hosts.write_text("127.0.0.1 localhost\n10.0.0.1 master1\n")
    assert probe.tree(str(hosts), "content") != first
    assert probe.tree(str(tmp_path / "none"), "content") == probe.sha("absent")


def test_an_object_entry_digests_what_a_secret_holds_and_never_shows_it(probe) -> None:
    secret: dict[str, Any] = {"kind": "Secret", "metadata": {"name": "pull", "namespace": "p1", "uid": "u1"},
              "data": {"password": "c2VjcmV0LXZhbHVl"}}  # fmt: skip
    key, digest = probe.object_entry(secret)
    assert key == "Secret p1/pull" and re.fullmatch(r"[0-9a-f]{64}", digest)
    assert "c2VjcmV0" not in key + digest
    assert probe.object_entry({**secret, "data": {"password": "b3RoZXI="}})[1] != digest
    volatile = {**secret, "metadata": {**secret["metadata"], "resourceVersion": "99",
                                       "annotations": {"control-plane.alpha.kubernetes.io/leader": "x"}}}  # fmt: skip
    assert probe.object_entry(volatile)[1] == digest  # what changes by itself is not a change
    ds: dict[str, Any] = {"kind": "DaemonSet", "metadata": {"name": "f", "namespace": "k", "uid": "u2", "generation": 3},
          "spec": {"a": 1}, "status": {"numberReady": 1}}  # fmt: skip
    assert probe.object_entry({**ds, "status": {"numberReady": 2}}) == probe.object_entry(ds)
    assert probe.object_entry({**ds, "metadata": {**ds["metadata"], "generation": 4}}) != probe.object_entry(
        ds
    )


def _cfg(site: Path) -> SiteConfig:
    return load_site(site)


def test_the_reasons_name_each_node_and_part_and_a_mapping_may_grow(site: Path) -> None:
    cfg = _cfg(site)
    nodes = {n.name: {"tree:/etc/containerd": "a", "images": {"reg/x:1": "sha256:1"}} for n in cfg.nodes}
    record = {"schema": 1, "inputs": "i", "nodes": nodes, "at": "then"}
    same = converged.Look(json.loads(json.dumps(nodes)), [])
    assert converged.differences(record, "i", cfg, same) == []
    grown = json.loads(json.dumps(nodes))
    grown["gpu1"]["images"]["researcher/y:2"] = "sha256:2"  # a researcher's job brought an image
    assert converged.differences(record, "i", cfg, converged.Look(grown, [])) == []
    drift = json.loads(json.dumps(nodes))
    drift["gpu1"]["tree:/etc/containerd"] = "b"
    drift["gpu2"]["images"] = {}
    assert converged.differences(record, "i", cfg, converged.Look(drift, ["node gpu2 is not Ready"])) == [
        "gpu1: tree:/etc/containerd changed since the last full install",
        "gpu2: images changed since the last full install",
        "node gpu2 is not Ready",
    ]
    assert converged.differences(None, "i", cfg, same) == ["no full install is recorded as finished"]
    assert converged.differences(record, "j", cfg, same) == [
        "the site config, the bundle or the toolkit changed since the last full install"
    ]
    fewer = {**record, "nodes": {k: v for k, v in nodes.items() if k != "gpu2"}}
    assert converged.differences(fewer, "i", cfg, same) == [
        "the site's nodes changed since the last full install"
    ]


def test_the_inputs_follow_the_site_files_and_the_extra_vars_not_runs_or_locks(site: Path) -> None:
    cfg = _cfg(site)
    first = converged.inputs_digest(cfg, {"appliance_bundle_manifest_sha256": "a" * 64})
    (site / "runs").mkdir()
    (site / "runs" / "20260101-site.log").write_text("a run")
    (site / ".appliance-run.lock").write_text("pid")
    assert converged.inputs_digest(cfg, {"appliance_bundle_manifest_sha256": "a" * 64}) == first
    assert converged.inputs_digest(cfg, {"appliance_bundle_manifest_sha256": "b" * 64}) != first
    (site / "group_vars" / "all").mkdir(parents=True, exist_ok=True)  # the rendered inventory's
    (site / "group_vars" / "all" / "50-local.yml").write_text("x: 1\n")
    assert converged.inputs_digest(cfg, {"appliance_bundle_manifest_sha256": "a" * 64}) != first


def _default_paths() -> dict[str, str]:
    """Every role default whose value is an absolute path."""
    out = {}
    for f in sorted(roles_dir().glob("*/defaults/main.yml")):
        for name, value in (yaml.safe_load(f.read_text()) or {}).items():
            if isinstance(value, str) and re.fullmatch(r"/[A-Za-z0-9._+/-]+", value):
                out[f"{f.parent.parent.name}: {name}"] = value
    return out


def test_every_path_in_a_role_default_is_watched_or_named_as_not() -> None:
    roots = [root for root, _ in [*converged.TREES, *converged.contract_trees()]] + list(
        converged.NOT_WATCHED
    )

    def under(path: str) -> bool:
        return any(
            path == r or path.startswith(r.rstrip("/") + ("" if r.endswith("-") else "/")) for r in roots
        )

    paths = _default_paths()
    assert len(paths) > 40, paths  # the roles' defaults were read
    missed = {k: p for k, p in paths.items() if not under(p)}
    assert missed == {}, missed


@dataclass
class NodesRead:
    """What the faked converged.look answers: each node's parts, what is unhealthy, or an error."""

    parts: dict[str, dict[str, object]] = field(default_factory=dict)
    unhealthy: list[str] = field(default_factory=list)
    error: Exception | None = None


@pytest.fixture
def nodes_read(monkeypatch: pytest.MonkeyPatch) -> NodesRead:
    state = NodesRead()

    def look(cfg: SiteConfig) -> converged.Look:
        if state.error:
            raise state.error
        nodes = {n.name: dict(state.parts.get(n.name, {"tree:/etc": "a"})) for n in cfg.nodes}
        return converged.Look(nodes, list(state.unhealthy))

    monkeypatch.setattr(converged, "look", look)
    return state


def _runner(monkeypatch: pytest.MonkeyPatch, result: RunResult | None = None) -> FakeRunner:
    runner = FakeRunner(result)
    monkeypatch.setattr(install_cmd, "make_runner", lambda: runner)
    return runner


def test_a_no_op_install_runs_no_role_and_a_changed_node_runs_them_naming_it(
    site: Path,
    calls,
    nodes_read,
    monkeypatch: pytest.MonkeyPatch,
    capsys,
) -> None:
    runner = _runner(monkeypatch)
    assert main([*INSTALL, str(site)]) == 0
    out = capsys.readouterr().out
    assert "the roles run: no full install is recorded as finished" in out and len(runner.requests) == 1
    record = json.loads((site / "runs" / "converged.json").read_text())
    assert record["nodes"] == {n.name: {"tree:/etc": "a"} for n in _cfg(site).nodes}
    assert oct((site / "runs" / "converged.json").stat().st_mode & 0o777) == "0o600"

    assert main([*INSTALL, str(site)]) == 0
    out = capsys.readouterr().out
    assert len(runner.requests) == 1, "a role ran though nothing changed"
    assert (
        f"nothing changed since the full install of {record['at']} (the inputs and 3 nodes' state, read again)"
        in out
    )
    assert "RECAP" not in out and "install finished" not in out
    assert len(calls) == 2  # the quick diagnose still ends it

    nodes_read.parts = {"gpu1": {"tree:/etc": "b"}}
    assert main([*INSTALL, str(site)]) == 0
    out = capsys.readouterr().out
    assert "the roles run: gpu1: tree:/etc changed since the last full install" in out
    assert len(runner.requests) == 2 and "install finished" in out

    assert main([*INSTALL, str(site), "--full"]) == 0
    assert len(runner.requests) == 3 and "the roles run" not in capsys.readouterr().out


def test_a_failed_run_leaves_no_record_and_a_check_run_keeps_it(
    site: Path,
    calls,
    nodes_read,
    monkeypatch: pytest.MonkeyPatch,
    capsys,
) -> None:
    _runner(monkeypatch)
    assert main([*INSTALL, str(site)]) == 0
    record = site / "runs" / "converged.json"
    assert record.is_file()
    check = _runner(monkeypatch)
    assert main([*INSTALL, str(site), "--check"]) == 0
    assert len(check.requests) == 1 and record.is_file()  # a dry run is not gated and changes nothing
    tags = _runner(monkeypatch)
    assert main([*INSTALL, str(site), "--tags", "helm"]) == 0
    assert len(tags.requests) == 1 and not record.exists()  # a partial run: the next looks again
    _runner(monkeypatch)
    assert main([*INSTALL, str(site)]) == 0 and record.is_file()
    _runner(monkeypatch, RunResult("failed", 2, {}, site))
    nodes_read.parts = {"gpu1": {"tree:/etc": "b"}}
    assert main([*INSTALL, str(site)]) == 5
    assert not record.exists()


def test_an_unhealthy_cluster_or_a_silent_node_is_never_recorded_and_runs_the_roles(
    site: Path,
    calls,
    nodes_read,
    monkeypatch: pytest.MonkeyPatch,
    capsys,
) -> None:
    runner = _runner(monkeypatch)
    nodes_read.unhealthy = ["DaemonSet kube-flannel/kube-flannel-ds: 2 of 3 pods ready"]
    assert main([*INSTALL, str(site)]) == 0
    err = capsys.readouterr().err
    assert (
        "warning: the next install runs every role again: DaemonSet kube-flannel/kube-flannel-ds: 2 of 3"
        in err
    )
    assert not (site / "runs" / "converged.json").exists()
    nodes_read.unhealthy = []
    assert main([*INSTALL, str(site)]) == 0 and (site / "runs" / "converged.json").is_file()
    nodes_read.error = Unreachable("gpu2 (127.0.0.3): SSH cannot connect: Connection refused")
    assert main([*INSTALL, str(site)]) == 0
    out = capsys.readouterr().out
    assert len(runner.requests) == 3
    assert (
        "the roles run: the nodes' state could not be read (gpu2 (127.0.0.3): SSH cannot connect: "
        "Connection refused)" in out
    )


def test_a_node_whose_digest_fails_is_named_with_its_last_line_and_one_without_json_too(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg(site)

    def failing(cfg: SiteConfig, node, command, timeout: int = 60, stdin: str | None = None) -> str:
        assert command[:2] == ["python3", "-"] and stdin and "def main()" in stdin  # the script on stdin
        if node.name == "gpu2":
            raise RemoteFailed(
                f"{node.name}: `python3 - ...` failed (rc=1)",
                "Traceback\nkubectl gave no answer within 30s\n",
            )
        return json.dumps({"parts": {"packages": "p"}, "unhealthy": []})

    monkeypatch.setattr(converged, "run_on", failing)
    with pytest.raises(ApplianceError) as err:
        converged.look(cfg)
    assert str(err.value) == "gpu2: its state could not be read: kubectl gave no answer within 30s"
    monkeypatch.setattr(converged, "run_on", lambda *a, **k: "Traceback: no JSON")
    with pytest.raises(
        ApplianceError, match=r"^master1: the state digest printed no JSON object: 'Traceback: no JSON'$"
    ):
        converged.look(cfg)
