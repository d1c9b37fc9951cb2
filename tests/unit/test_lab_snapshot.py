"""Installed-lab snapshots: what names one (so a stale one is never reused), what a killed save
leaves, and that a node booted again from its installed rootfs keeps the install's /etc/hosts.
The save/restore round trip itself runs in the lab (every e2e module that starts from one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance_cli.lab import snapshot
from appliance_cli.lab.layout import LabLayout
from appliance_cli.lab.node import LabNode, refresh_identity
from tests._support import labsnap
from tests._support.timings import SuiteTimings


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "roles/r/tasks").mkdir(parents=True)
    (repo / "roles/r/tasks/main.yml").write_text("- name: A\n  ansible.builtin.ping:\n")
    (repo / "playbooks").mkdir()
    (repo / "playbooks/site.yml").write_text("- hosts: all\n")
    return repo


def test_one_changed_line_of_one_role_changes_the_digest(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    paths = ("roles", "playbooks")
    before = labsnap.tree_digest(paths, repo)
    assert labsnap.tree_digest(paths, repo) == before  # stable
    (repo / "roles/r/__pycache__").mkdir()
    (repo / "roles/r/__pycache__/x.pyc").write_bytes(b"\0")
    assert labsnap.tree_digest(paths, repo) == before  # byte code is no input
    task = repo / "roles/r/tasks/main.yml"
    task.write_text(task.read_text().replace("ping", "pong"))
    assert labsnap.tree_digest(paths, repo) != before
    task.write_text(task.read_text().replace("pong", "ping"))
    assert labsnap.tree_digest(paths, repo) == before
    task.chmod(0o755)
    assert labsnap.tree_digest(paths, repo) != before  # a mode is an input too


def test_the_real_tree_includes_the_roles_and_the_stand_in() -> None:
    assert {"roles", "playbooks", "appliance_cli", "module_utils", "tests/standin"} <= set(labsnap.PRODUCT)
    for rel in labsnap.PRODUCT:
        assert (labsnap.REPO / rel).exists(), rel


def _key(tmp_path: Path, **over: object) -> str:
    bundle = tmp_path / "bundle"
    bundle.mkdir(exist_ok=True)
    (bundle / "manifest.json").write_text(str(over.pop("manifest", "{}")))
    (bundle / "manifest.sig").write_text("sig")
    pub = tmp_path / "lab.pub"
    pub.write_text("pub")
    base = tmp_path / "base.tar.zst"
    base.write_text("rootfs")
    (tmp_path / "base.tar.zst.sha256").write_text(str(over.pop("base_sha", "aa")) + "\n")
    args: dict = dict(lab="e2e", nodes=4, site_text="site: {}\n", bundle=bundle, public_key=pub, args=(),
                      product="p", base_image=base)  # fmt: skip
    args.update(over)
    return labsnap.key(**args)  # type: ignore[arg-type]


def test_every_input_names_another_snapshot(tmp_path: Path) -> None:
    base = _key(tmp_path)
    assert _key(tmp_path) == base
    for change in (
        {"lab": "two"}, {"nodes": 2}, {"site_text": "site: {name: x}\n"}, {"args": ("--skip-diagnose",)},
        {"product": "q"}, {"manifest": '{"a": 1}'}, {"base_sha": "bb"},
    ):  # fmt: skip
        assert _key(tmp_path, **change) != base, change


def test_no_key_before_the_base_image_is_built(tmp_path: Path) -> None:
    """CI at dbb0fbe: the first test process keyed the session lab before its first `lab up` built
    the base image, the second after; each took the other's snapshot for stale and removed it."""
    _key(tmp_path)
    (tmp_path / "base.tar.zst.sha256").unlink()
    with pytest.raises(FileNotFoundError, match="no base image"):
        labsnap.key(lab="e2e", nodes=4, site_text="", bundle=tmp_path / "bundle", public_key=tmp_path / "lab.pub",
                    args=(), product="p", base_image=tmp_path / "base.tar.zst")  # fmt: skip


def test_a_snapshot_half_written_by_a_killed_run_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = tmp_path / f".e2e-abc.tmp-{dead.pid}"
    live = tmp_path / f".e2e-def.tmp-{os.getpid()}"
    done = tmp_path / "e2e-abc"
    for d in (gone, live, done):
        (d / "nodes").mkdir(parents=True)
    snapshot._remove_abandoned(tmp_path)
    assert not gone.exists()
    assert live.exists() and done.exists()


def test_only_a_snapshot_with_its_metadata_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("APPLIANCE_LAB_NAME", "two")
    layout = LabLayout.default()
    snap = snapshot.path(layout, "two", "k1")
    (snap / "nodes").mkdir(parents=True)
    assert not snapshot.exists(layout, "two", "k1")  # copied, but its metadata (written last) is missing
    (snap / snapshot.META).write_text('{"extra": {}}')
    assert snapshot.exists(layout, "two", "k1")
    other = snapshot.path(layout, "two", "k2")
    other.mkdir()
    (snapshot.store(layout) / "twofold-k3").mkdir()  # another name that merely starts alike
    (snapshot.store(layout) / "two-gw0-k4").mkdir()
    assert snapshot.others(layout, "two", "k1") == [other]


def _node_root(tmp_path: Path) -> tuple[LabLayout, Path]:
    layout = LabLayout(name="t", dir=tmp_path / "lab", cache_dir=tmp_path / "cache")
    root = layout.node_root("master1")
    (root / "etc").mkdir(parents=True)
    for home in ("root", "home/debian"):
        (root / home).mkdir(parents=True)
    return layout, root


def test_a_node_booted_again_keeps_the_installs_hosts_block(tmp_path: Path) -> None:
    layout, root = _node_root(tmp_path)
    nodes = [LabNode(1, "master1", "10.77.0.11"), LabNode(2, "worker1", "10.77.0.12")]
    refresh_identity(layout, nodes[0], nodes, "ssh-ed25519 AAAA lab")
    hosts = root / "etc/hosts"
    installed = hosts.read_text() + "# BEGIN appliance nodes\n10.77.0.11 master1\n# END appliance nodes\n"
    hosts.write_text(installed)
    refresh_identity(layout, nodes[0], nodes, "ssh-ed25519 AAAA lab")
    assert hosts.read_text() == installed
    refresh_identity(layout, nodes[0], nodes[:1], "ssh-ed25519 AAAA lab")  # the node list changed
    assert "worker1" not in hosts.read_text() and "BEGIN appliance" not in hosts.read_text()


class _Report:
    def __init__(self, nodeid: str, when: str, duration: float) -> None:
        self.nodeid, self.when, self.duration = nodeid, when, duration


def test_the_time_table_splits_setup_from_tests_per_module() -> None:
    t = SuiteTimings()
    for nodeid, when, d in (
        ("tests/e2e/a.py::t1", "setup", 30.0), ("tests/e2e/a.py::t1", "call", 2.0),
        ("tests/e2e/a.py::t2", "call", 3.0), ("tests/e2e/a.py::t2", "teardown", 5.0),
        ("tests/unit/b.py::t", "setup", 0.1), ("tests/unit/b.py::t", "call", 0.2),
    ):  # fmt: skip
        t.pytest_runtest_logreport(_Report(nodeid, when, d))  # type: ignore[arg-type]
    rows = t.rows()
    assert [r["module"] for r in rows] == ["tests/e2e/a.py", "tests/unit/b.py"]
    assert (rows[0]["setup"], rows[0]["tests"], rows[0]["count"]) == (35.0, 5.0, 2)


def test_reverse_order_reverses_modules_and_keeps_each_modules_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import pytest_collection_modifyitems

    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

    ids = ["a.py::1", "a.py::2", "b.py::1", "c.py::1", "c.py::2"]
    items = [Item(i) for i in ids]
    monkeypatch.delenv("APPLIANCE_TEST_ORDER", raising=False)  # `make test-reverse` sets it
    pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ids
    monkeypatch.setenv("APPLIANCE_TEST_ORDER", "reverse")
    pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["c.py::1", "c.py::2", "b.py::1", "a.py::1", "a.py::2"]


def test_cp_keeps_what_a_node_needs(tmp_path: Path) -> None:
    """The copy a snapshot is made with keeps owners, modes, symlinks and hard links."""
    src = tmp_path / "src"
    (src / "etc").mkdir(parents=True)
    f = src / "etc/key"
    f.write_text("k")
    f.chmod(0o600)
    (src / "link").symlink_to("etc/key")
    os.link(f, src / "hard")
    snapshot._copy_tree(src, tmp_path / "dst", "test copy", tmp_path / "log")
    dst = tmp_path / "dst"
    assert (dst / "etc/key").stat().st_mode & 0o777 == 0o600
    assert os.readlink(dst / "link") == "etc/key"
    assert (dst / "hard").stat().st_ino == (dst / "etc/key").stat().st_ino
    shutil.rmtree(dst)


def test_the_copy_dies_with_its_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cp runs under `setpriv --pdeathsig KILL`: a save killed with -9 leaves no cp writing into the
    copy the next save removes (scripts/drill-killed-suite.sh shows it on the lab)."""
    seen: list[list[str]] = []
    monkeypatch.setattr(snapshot, "run", lambda argv, **kw: seen.append(argv))
    snapshot._copy_tree(tmp_path / "a", tmp_path / "b", "test copy", tmp_path / "log")
    assert seen == [
        ["setpriv", "--pdeathsig", "KILL", "--", "cp", "-a", "--", str(tmp_path / "a"), str(tmp_path / "b")]
    ]


def test_under_make_test_a_test_that_cannot_run_fails_naming_why(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text("import pytest\n\ndef test_needs_a_tool():\n    pytest.skip('needs frobnicate')\n")
    repo = labsnap.REPO

    def run(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider", str(probe)],
            cwd=repo, capture_output=True, text=True, env={**os.environ, **env}, timeout=120,
        )  # fmt: skip

    plain = run(APPLIANCE_SKIP_IS_FAILURE="0")
    assert plain.returncode == 0 and "1 skipped" in plain.stdout, plain.stdout
    strict = run(APPLIANCE_SKIP_IS_FAILURE="1")
    assert strict.returncode == 1 and "1 failed" in strict.stdout, strict.stdout
    assert "could not run, which `make test` counts as a failure" in strict.stdout
    assert "needs frobnicate" in strict.stdout


def test_a_snapshot_restored_into_another_lab_reaches_its_nodes_through_that_labs_namespace(
    tmp_path: Path,
) -> None:
    import yaml

    from appliance_cli.lab import sitegen

    gw0 = LabLayout(name="e2e-gw0", dir=tmp_path / "a", cache_dir=tmp_path / "c")
    gw1 = LabLayout(name="e2e-gw1", dir=tmp_path / "b", cache_dir=tmp_path / "c")
    text = yaml.safe_dump(sitegen.site_data(gw0, 2), sort_keys=False)
    moved = yaml.safe_load(snapshot.retarget(text, "e2e-gw0", gw1))
    assert moved["ssh"]["proxy_command"] == "ip netns exec e2e-gw1-net nc %h %p"
    assert moved == yaml.safe_load(text) | {"ssh": moved["ssh"]}  # nothing else changed
    assert snapshot.retarget(text, "e2e-gw0", gw0) == text
