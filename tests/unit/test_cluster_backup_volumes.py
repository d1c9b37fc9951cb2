"""Where a Run:ai site's backend data lives, as `appliance backup` records and says it: the filter
(roles/cluster_backup/filter_plugins/cluster_backup_volumes.py) and the CLI's warning lines."""

from __future__ import annotations

from appliance_cli.cli.backup_cmd import runai_data_warnings
from tests._support.modules import load_file
from tests._support.paths import ROOT

f = load_file("cluster_backup_volumes", ROOT / "roles" / "cluster_backup" / "filter_plugins" / "cluster_backup_volumes.py")  # fmt: skip


def _pvc(name: str, volume: str = "", phase: str = "Bound", size: str = "") -> dict:
    status: dict = {"phase": phase}
    if size:
        status["capacity"] = {"storage": size}
    return {"metadata": {"name": name, "namespace": "runai-backend"},
            "spec": {"volumeName": volume, "storageClassName": "nfs-client"}, "status": status}  # fmt: skip


def _pv(name: str, spec: dict) -> dict:
    return {"metadata": {"name": name}, "spec": spec}


def test_each_claim_is_named_with_where_its_data_lives_in_name_order() -> None:
    pvcs = {"items": [_pvc("data-runai-backend-thanos-0", "pvc-2", size="20Gi"),
                      _pvc("data-runai-backend-postgresql-0", "pvc-1", size="8Gi")]}  # fmt: skip
    pvs = {"items": [_pv("pvc-1", {"nfs": {"server": "10.77.0.11", "path": "/srv/nfs/runai-backend-data-pg"}}),
                     _pv("pvc-2", {"hostPath": {"path": "/var/lib/thanos"}}), _pv("other", {"nfs": {}})]}  # fmt: skip
    got = f.volumes(pvcs, pvs)
    assert [v["claim"] for v in got] == [
        "runai-backend/data-runai-backend-postgresql-0",
        "runai-backend/data-runai-backend-thanos-0",
    ]
    assert got[0] == {
        "claim": "runai-backend/data-runai-backend-postgresql-0",
        "phase": "Bound",
        "volume": "pvc-1",
        "storage_class": "nfs-client",
        "capacity": "8Gi",
        "source": "nfs 10.77.0.11:/srv/nfs/runai-backend-data-pg",
    }
    assert got[1]["source"] == "hostPath /var/lib/thanos"


def test_a_local_or_csi_volume_and_an_unbound_claim_are_named_too() -> None:
    local = {"local": {"path": "/mnt/disks/pg"},
             "nodeAffinity": {"required": {"nodeSelectorTerms": [
                 {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["master1"]}]}]}}}  # fmt: skip
    pvs = {
        "items": [
            _pv("a", local),
            _pv("b", {"csi": {"driver": "csi.trident.netapp.io", "volumeHandle": "vol7"}}),
        ]
    }
    pvcs = {"items": [_pvc("a", "a"), _pvc("b", "b"), _pvc("c", phase="Pending"), _pvc("d", "gone")]}
    assert [v["source"] for v in f.volumes(pvcs, pvs)] == [
        "local /mnt/disks/pg on master1",
        "csi csi.trident.netapp.io vol7",
        "not bound to a volume: no data yet",
        "not bound to a volume: no data yet",
    ]
    assert f.volumes({}, {}) == [] and f.volumes({"items": None}, None) == []


def test_the_cli_says_the_database_is_not_in_the_backup_and_names_each_volume() -> None:
    record = {"namespace": "runai-backend", "volumes": f.volumes(
        {"items": [_pvc("data-runai-backend-postgresql-0", "pvc-1", size="8Gi")]},
        {"items": [_pv("pvc-1", {"nfs": {"server": "nfs1", "path": "/export/pg"}})]})}  # fmt: skip
    lines = runai_data_warnings(record)
    assert "NOT in this backup" in lines[0] and "1 volume(s) of runai-backend" in lines[0]
    assert lines[1] == "  runai-backend/data-runai-backend-postgresql-0 (Bound, 8Gi): nfs nfs1:/export/pg"


def test_no_claim_at_all_is_said_too_never_silence() -> None:
    (line,) = runai_data_warnings({"namespace": "runai-backend", "volumes": []})
    assert "no volume claim in namespace runai-backend" in line and "external PostgreSQL" in line
