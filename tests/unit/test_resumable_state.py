"""module_utils/resumable_state.py and the module resumable_state (roles/resumable_state): one
key per operation in a shared file, merged under a lock, written atomically, a newer schema or a
corrupt file refused naming the file, the legacy flat layout read, check mode writing nothing."""

from __future__ import annotations

import fcntl
import io
import json
import os
import sys
import threading
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._support.modules import load_role_module

module = load_role_module("resumable_state", "resumable_state")
rs = sys.modules["ansible.module_utils.resumable_state"]  # the project's, loaded with the module


def _doc(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_merge_creates_the_file_0600_in_a_0700_dir_and_reads_back(tmp_path):
    path = tmp_path / "upgrade" / "state.json"
    assert rs.merge(str(path), "kube_upgrade", {"target": "v1.23.17", "done": []}) == (
        {},
        {"target": "v1.23.17", "done": []},
        True,
    )
    after = {"target": "v1.23.17", "done": []}
    assert _doc(path) == {"schema": rs.SCHEMA, "kube_upgrade": {"target": "v1.23.17", "done": []}}
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert rs.read(str(path), "kube_upgrade") == after and rs.read(str(path), "chart_upgrade") == {}
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.json", "state.json.lock"]


def test_merge_touches_only_its_own_key(tmp_path):
    path = tmp_path / "state.json"
    rs.merge(str(path), "kube_upgrade", {"target": "v1", "done": ["m1"], "snapshot": "/s.db"})
    rs.merge(str(path), "chart_upgrade", {"target": "v1", "charts": {"a/b": "c 1 -> 2"}})
    rs.merge(str(path), "kube_upgrade", {"done": ["m1", "w1"]})
    assert _doc(path) == {
        "schema": 1,
        "kube_upgrade": {"target": "v1", "done": ["m1", "w1"], "snapshot": "/s.db"},
        "chart_upgrade": {"target": "v1", "charts": {"a/b": "c 1 -> 2"}},
    }


@settings(max_examples=40, deadline=None)
@given(
    other=st.dictionaries(st.text(min_size=1, max_size=5), st.integers() | st.text(max_size=5), max_size=4),
    change=st.dictionaries(
        st.text(min_size=1, max_size=5), st.integers() | st.lists(st.text(max_size=3)), max_size=4
    ),
)
def test_any_merge_leaves_the_other_keys_as_they_were(tmp_path_factory, other, change):
    path = tmp_path_factory.mktemp("s") / "state.json"
    path.write_text(rs.dump({"schema": 1, "chart_upgrade": other, "kube_upgrade": {"target": "v1"}}))
    before, after, changed = rs.merge(str(path), "kube_upgrade", change)
    assert before == {"target": "v1"} and after == {"target": "v1", **change} and changed == (after != before)
    assert _doc(path) == {"schema": 1, "chart_upgrade": other, "kube_upgrade": after}


def test_replace_starts_the_key_afresh_and_leaves_the_others(tmp_path):
    path = tmp_path / "state.json"
    rs.merge(str(path), "kube_upgrade", {"target": "v1", "done": ["m1"], "snapshot": "/s.db"})
    rs.merge(str(path), "chart_upgrade", {"target": "v1", "charts": {}})
    fresh = {"target": "v2", "done": [], "draining": ""}
    assert rs.merge(str(path), "kube_upgrade", fresh, check_mode=True, replace=True)[1] == fresh
    assert rs.merge(str(path), "kube_upgrade", fresh, replace=True)[1] == fresh
    assert _doc(path) == {"schema": 1, "kube_upgrade": fresh, "chart_upgrade": {"target": "v1", "charts": {}}}


def test_an_unchanged_merge_does_not_write(tmp_path):
    path = tmp_path / "state.json"
    rs.merge(str(path), "etcd_restore", {"phase": "stopping"})
    stamp = path.stat().st_mtime_ns, path.stat().st_ino
    assert rs.merge(str(path), "etcd_restore", {"phase": "stopping"})[2] is False
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == stamp


def test_check_mode_writes_nothing_not_even_the_directory(tmp_path):
    path = tmp_path / "restore" / "state.json"
    assert rs.merge(str(path), "etcd_restore", {"phase": "stopping"}, check_mode=True) == (
        {},
        {"phase": "stopping"},
        True,
    )
    assert not path.parent.exists()
    path.parent.mkdir()
    path.write_text('{"schema": 1, "etcd_restore": {"phase": "stopping"}}')
    assert rs.merge(str(path), "etcd_restore", {"phase": "done"}, check_mode=True)[1] == {"phase": "done"}
    assert _doc(path)["etcd_restore"] == {"phase": "stopping"} and sorted(os.listdir(path.parent)) == [
        "state.json"
    ]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    rs.merge(str(path), "kube_upgrade", {"done": ["m1"]})
    old = path.read_text()

    def fsync_fails(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rs.os, "fsync", fsync_fails)
    with pytest.raises(OSError, match="No space"):
        rs.merge(str(path), "kube_upgrade", {"done": ["m1", "w1"]})
    assert path.read_text() == old
    assert sorted(os.listdir(tmp_path)) == ["state.json", "state.json.lock"]


def test_a_merge_waits_for_the_lock(tmp_path):
    path = tmp_path / "state.json"
    rs.merge(str(path), "kube_upgrade", {"done": []})
    holder = os.open(f"{path}.lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    done = threading.Event()
    t = threading.Thread(target=lambda: (rs.merge(str(path), "chart_upgrade", {"charts": {}}), done.set()))
    t.start()
    assert not done.wait(0.3)  # blocked while another holds the lock
    assert "chart_upgrade" not in _doc(path)
    os.close(holder)
    t.join(5)
    assert done.is_set() and _doc(path)["chart_upgrade"] == {"charts": {}}


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"schema": 2, "kube_upgrade": {}}', "schema 2 is newer than this toolkit's (1)"),
        ('{"schema": "1"}', "schema '1' is not a version"),
        ('{"schema": 1, "kube_upgrade": []}', "'kube_upgrade' is not a JSON object"),
        ("[" * 100000, "not JSON (nested too deep)"),
    ],
)
def test_a_corrupt_or_newer_file_is_refused_naming_it_and_left_alone(tmp_path, text, message):
    path = tmp_path / "state.json"
    path.write_text(text)
    for call in (
        lambda: rs.read(str(path), "kube_upgrade"),
        lambda: rs.merge(str(path), "kube_upgrade", {"a": 1}),
    ):
        with pytest.raises(rs.StateError) as e:
            call()
        assert str(e.value).startswith(f"{path}: ") and message in str(e.value) and "\n" not in str(e.value)
    assert path.read_text() == text


def test_a_file_with_bytes_that_are_not_utf8_is_refused_as_not_json_and_left_alone(tmp_path):
    path = tmp_path / "state.json"
    path.write_bytes(b'{"schema": 1, \xff}')
    for call in (
        lambda: rs.read(str(path), "kube_upgrade"),
        lambda: rs.merge(str(path), "kube_upgrade", {"a": 1}),
    ):
        with pytest.raises(rs.StateError, match=r"state.json: not JSON"):
            call()
    assert path.read_bytes() == b'{"schema": 1, \xff}'


def test_the_legacy_flat_upgrade_file_is_split_by_operation_and_rewritten_at_the_first_merge(tmp_path):
    path = tmp_path / "state.json"
    legacy = {"target": "v1.23.17", "done": ["master1"], "draining": "worker1", "snapshot": "/s.db",
              "charts": {"a/b": "c 1 -> 2"}, "charts_upgrading": ""}  # fmt: skip
    path.write_text(json.dumps(legacy, indent=2) + "\n")
    kube = {"target": "v1.23.17", "done": ["master1"], "draining": "worker1", "snapshot": "/s.db"}
    assert rs.read(str(path), "kube_upgrade") == kube
    assert rs.read(str(path), "chart_upgrade") == {
        "target": "v1.23.17",
        "charts": {"a/b": "c 1 -> 2"},
        "charts_upgrading": "",
    }
    assert rs.merge(str(path), "kube_upgrade", {"draining": "worker1"}, check_mode=True)[2]  # a rewrite
    assert json.loads(path.read_text()) == legacy
    assert rs.merge(str(path), "kube_upgrade", {"draining": "worker1"})[2]  # unchanged, yet rewritten
    assert _doc(path)["schema"] == 1 and not rs.merge(str(path), "kube_upgrade", {"draining": "worker1"})[2]
    rs.merge(str(path), "kube_upgrade", {"draining": ""})
    assert _doc(path) == {
        "schema": 1,
        "kube_upgrade": {**kube, "draining": ""},
        "chart_upgrade": {"target": "v1.23.17", "charts": {"a/b": "c 1 -> 2"}, "charts_upgrading": ""},
    }


def test_the_legacy_restore_file_is_etcd_restores(tmp_path):
    path = tmp_path / "state.json"
    legacy = {
        "backup": "20240102T030405Z",
        "phase": "restored",
        "snapshot": {"revision": 5},
        "data_dir": "/d",
    }
    path.write_text(json.dumps(legacy))
    assert rs.read(str(path), "etcd_restore") == legacy
    rs.merge(str(path), "etcd_restore", {"phase": "done"})
    assert _doc(path) == {"schema": 1, "etcd_restore": {**legacy, "phase": "done"}}


def _run_module(args: dict[str, Any], check_mode: bool = False, diff: bool = False) -> dict[str, Any]:
    """The module's main() as Ansible runs it on the node: its JSON answer."""
    from ansible.module_utils import basic

    args = {**args, "_ansible_check_mode": check_mode, "_ansible_diff": diff}
    basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
    basic._ANSIBLE_PROFILE = "legacy"  # ansible-core 2.19: how the controller serialized the args
    out = io.StringIO()
    try:
        with redirect_stdout(out), pytest.raises(SystemExit):
            module.main()
    finally:
        basic._ANSIBLE_ARGS = basic._ANSIBLE_PROFILE = None
    return json.loads(out.getvalue())


def test_the_module_merges_reports_changed_once_and_sets_the_fact(tmp_path):
    path = str(tmp_path / "u" / "state.json")
    args = {"path": path, "key": "chart_upgrade", "state": "merge", "value": {"charts_upgrading": "a/b"}}
    dry = _run_module(args, check_mode=True, diff=True)
    assert dry["changed"] and dry["diff"]["after"] == {"charts_upgrading": "a/b"} and not os.path.exists(path)
    first = _run_module(args)
    assert first["changed"] and first["value"] == {"charts_upgrading": "a/b"}
    assert first["ansible_facts"] == {"resumable_state_chart_upgrade": {"charts_upgrading": "a/b"}}
    assert not _run_module(args)["changed"]
    read = _run_module({"path": path, "key": "chart_upgrade"}, check_mode=True)
    assert not read["changed"] and read["value"] == {"charts_upgrading": "a/b"}


def test_the_module_fails_on_a_newer_schema_in_one_line(tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"schema": 9}')
    got = _run_module({"path": str(path), "key": "kube_upgrade"})
    assert (
        got["failed"]
        and got["msg"] == f"{path}: schema 9 is newer than this toolkit's (1); use the newer toolkit"
    )
    assert _run_module({"path": str(path), "key": "Kube-Upgrade"})["msg"].startswith("key 'Kube-Upgrade'")


def test_add_appends_to_the_list_the_file_holds_not_the_one_the_task_read(tmp_path):
    # Two nodes' passes that each read the state before the other recorded itself: with `add`, both
    # are in `done` (a whole `done` list computed from a stale read would drop the other node).
    path = str(tmp_path / "state.json")
    rs.merge(path, "kube_upgrade", {"target": "v1.23.17", "done": []})
    stale = rs.read(path, "kube_upgrade")
    rs.merge(path, "kube_upgrade", {"draining": ""}, add={"done": ["worker1"]})
    _, after, changed = rs.merge(path, "kube_upgrade", {"draining": ""}, add={"done": ["worker2", "worker2"]})
    assert stale["done"] == [] and changed and after["done"] == ["worker1", "worker2"]
    assert rs.merge(path, "kube_upgrade", {}, add={"done": ["worker1"]})[2] is False  # each item once
    with pytest.raises(rs.StateError, match=r"state.json: kube_upgrade.target is not a list"):
        rs.merge(path, "kube_upgrade", {}, add={"target": ["x"]})


def test_the_module_adds_and_refuses_add_where_it_means_nothing(tmp_path):
    path = str(tmp_path / "state.json")
    args = {"path": path, "key": "kube_upgrade", "state": "merge", "add": {"done": ["master1"]}}
    assert _run_module(args)["value"] == {"done": ["master1"]} and not _run_module(args)["changed"]
    assert _run_module({**args, "add": {"done": "master1"}})["msg"] == "add.done: a list of items to append"
    assert _run_module({**args, "state": "read"})["msg"] == "add: only with state merge or replace"
