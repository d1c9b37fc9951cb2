"""core/opstate.py: the typed reading of the resumable state files the module resumable_state
writes (module_utils/resumable_state.py): its schema and legacy layout held to the module's,
a corrupt file or a newer schema one line naming file and node, the flat file of the toolkit
before the schema read as schema 0."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance_cli.core import opstate
from appliance_cli.errors import StateFileError
from tests._support.modules import load_module_utils

load_module_utils()
node_side = sys.modules["ansible.module_utils.resumable_state"]
UP, RE = "/var/lib/appliance/upgrade/state.json", "/var/lib/appliance/restore/state.json"


def test_the_cli_and_the_module_agree_on_the_schema_and_the_legacy_layout():
    assert opstate.SCHEMA == node_side.SCHEMA
    assert opstate.LEGACY_FIELDS == node_side.LEGACY_FIELDS
    files = {tuple(m.model_fields) for m in (opstate.UpgradeState, opstate.RestoreState)}
    assert files == {("schema_", *group) for group in node_side.LEGACY_FILES}


def test_what_the_module_writes_the_cli_reads(tmp_path):
    path = tmp_path / "state.json"
    node_side.merge(str(path), "kube_upgrade", {"target": "v1.23.17", "done": ["m1"], "draining": ""})
    node_side.merge(str(path), "chart_upgrade", {"target": "v1.23.17", "charts": {"a/b": "c 1 -> 2"}})
    state = opstate.parse_upgrade(path.read_text(), UP, "master1")
    assert state.schema_ == 1 and state.kube_upgrade == opstate.KubeUpgrade(target="v1.23.17", done=["m1"])
    assert state.chart_upgrade.charts == {"a/b": "c 1 -> 2"}


def test_no_file_is_no_state():
    assert opstate.parse_restore("", RE, "master1").etcd_restore == opstate.EtcdRestore()


def test_the_legacy_restore_file_is_etcd_restores():
    legacy = {
        "backup": "20240102T030405Z",
        "phase": "stopping",
        "snapshot": {"revision": 5},
        "data_dir": "/d",
    }
    state = opstate.parse_restore(json.dumps(legacy), RE, "master1")
    assert (
        state.schema_ == 0 and state.etcd_restore.phase == "stopping" and state.etcd_restore.data_dir == "/d"
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not JSON"),
        ("[" * 100000, "not JSON"),  # nested too deep for json's decoder
        ('"x"', "not a JSON object"),
        ('{"schema": 7, "etcd_restore": {}}', "schema 7 is newer than this toolkit's (1)"),
        ('{"schema": true}', "schema 'True' is not a version"),
        ('{"schema": 1, "etcd_restore": {"phase": "sideways"}}', "etcd_restore.phase: Input should be"),
        ('{"schema": 1, "etcd_restore": []}', "etcd_restore: Input should be a valid dictionary"),
    ],
)
def test_a_corrupt_or_newer_file_is_one_line_naming_file_and_node(text, message):
    with pytest.raises(StateFileError) as e:
        opstate.parse_restore(text, RE, "master1")
    assert e.value.message.startswith(f"{RE} on master1: {message}") and "\n" not in e.value.message
    assert e.value.hint


@given(st.text(max_size=60))
def test_any_text_is_a_state_or_one_line(text):
    for parse, path in ((opstate.parse_upgrade, UP), (opstate.parse_restore, RE)):
        try:
            parse(text, path, "master1")
        except StateFileError as e:
            assert e.message.startswith(f"{path} on master1: ") and "\n" not in e.message
