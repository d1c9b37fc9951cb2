"""core/backups.py: what the master answers about a backup is checked before the CLI prints it; a
malformed answer is one line naming the file, never a traceback. run_on is replaced: no SSH."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance_cli.core import backups
from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.errors import ApplianceError, StateFileError

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "appliance.yml"
NAME = "20261125T010203Z"
WHERE = f"{backups.BACKUP_ROOT}/{NAME}"
DIGEST = "ab" * 32


@pytest.fixture
def cfg(tmp_path: Path) -> SiteConfig:
    (tmp_path / "appliance.yml").write_text(EXAMPLE.read_text())
    return load_site(tmp_path / "appliance.yml")  # a Run:ai site


def _master(monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> list[list[str]]:
    asked: list[list[str]] = []

    def run_on(cfg, node, command, timeout=60):  # type: ignore[no-untyped-def]
        asked.append(command)
        return files[command[-1]]

    monkeypatch.setattr(backups, "run_on", run_on)
    return asked


def test_a_backup_lists_its_summed_files_and_runai_volumes(cfg, monkeypatch) -> None:
    record = {
        "namespace": "runai-backend",
        "volumes": [{"claim": "c", "phase": "Bound", "source": "nfs x:/y"}],
    }
    asked = _master(monkeypatch, {
        f"{WHERE}/SHA256SUMS": f"{DIGEST}  etcd-snapshot.db\n{DIGEST} *helm-values/a b.yaml\n",
        f"{WHERE}/runai-backend-volumes.json": json.dumps(record),
    })  # fmt: skip
    got = backups.read_backup(cfg, NAME)
    assert got == backups.Backup(NAME, WHERE, ["etcd-snapshot.db", "helm-values/a b.yaml"], record)
    assert asked[0] == ["cat", "--", f"{WHERE}/SHA256SUMS"]


@pytest.mark.parametrize(
    "sums, volumes, message",
    [
        ("garbage\n", "{}", f"{WHERE}/SHA256SUMS on master1: not a sha256sum line: 'garbage'"),
        (f"{DIGEST}  a\n", "[]", f"{WHERE}/runai-backend-volumes.json on master1: not a JSON object"),
        (f"{DIGEST}  a\n", "{", f"{WHERE}/runai-backend-volumes.json on master1: no JSON in it"),
        (
            f"{DIGEST}  a\n",
            '{"volumes": [{"claim": 1}]}',
            "runai-backend-volumes.json on master1: volumes is",
        ),
    ],
)
def test_a_malformed_answer_is_one_line_naming_the_file(cfg, monkeypatch, sums, volumes, message) -> None:
    _master(monkeypatch, {f"{WHERE}/SHA256SUMS": sums, f"{WHERE}/runai-backend-volumes.json": volumes})
    with pytest.raises(ApplianceError) as e:
        backups.read_backup(cfg, NAME)
    assert message in e.value.message and "\n" not in e.value.message


def test_the_restored_state_is_read_and_a_malformed_one_refused(cfg, monkeypatch) -> None:
    state = {
        "backup": NAME,
        "snapshot": {"revision": 3, "totalKey": 9},
        "nodes": ["master1"],
        "data_dir": "/d",
    }
    # module resumable_state's layout, and the flat one of the toolkit before the schema
    for doc in ({"schema": 1, "etcd_restore": state}, state):
        _master(monkeypatch, {backups.RESTORE_STATE_FILE: json.dumps(doc)})
        assert backups.restored(cfg) == backups.Restored(NAME, 3, 9, ["master1"], "/d", "")
    bad = {"schema": 1, "etcd_restore": {**state, "nodes": "master1"}}
    _master(monkeypatch, {backups.RESTORE_STATE_FILE: json.dumps(bad)})
    with pytest.raises(StateFileError) as e:
        backups.restored(cfg)
    assert e.value.message == (
        f"{backups.RESTORE_STATE_FILE} on master1: etcd_restore.nodes: Input should be a valid list"
    )
