"""The cluster_backup role's Run:ai step run by Ansible against localhost (the lab's open stack
never takes it): kubectl is Debian's real client, the API server the test stand-in. Shown: the backend
namespace's claims, and only those, recorded with the volume behind each and where its data lives
(runai-backend-volumes.json, 0600); --check writes nothing; a re-run changes nothing."""

from __future__ import annotations

import json

from tests._support.standin_localhost import env, localhost_changed, run_play  # noqa: F401  (env: the fixture)

NS = "runai-backend"


def _claim(ns: str, name: str, volume: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "nfs-client", "volumeName": volume,
                     "resources": {"requests": {"storage": "8Gi"}}}}  # fmt: skip


def _volume(name: str, path: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "8Gi"}, "accessModes": ["ReadWriteOnce"],
                     "nfs": {"server": "10.77.0.11", "path": path}}}  # fmt: skip


def _run(env: dict, *flags: str):  # noqa: F811
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local",
             "tasks": [{"ansible.builtin.include_role": {"name": "cluster_backup", "tasks_from": "runai_volumes"}}]}]  # fmt: skip
    extra = {
        "cluster_backup_kubeconfig": str(env["cluster"].kubeconfig),
        "cluster_backup_root": str(env["tmp"] / "backups"),
        "cluster_backup_name": "20261125T000000Z",
    }
    return run_play(env, play, extra, *flags)


def test_the_backends_volumes_are_recorded_with_where_their_data_lives(env) -> None:  # noqa: F811
    api = env["cluster"].admin()
    api.call(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    )
    api.call(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
    )
    api.call("POST", "/api/v1/persistentvolumes", _volume("pvc-pg", "/srv/nfs/runai-backend-data-pg"))
    api.call("POST", "/api/v1/persistentvolumes", _volume("pvc-other", "/srv/nfs/team-a"))
    api.call("POST", f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
             _claim(NS, "data-runai-backend-postgresql-0", "pvc-pg"))  # fmt: skip
    api.call(
        "POST", "/api/v1/namespaces/team-a/persistentvolumeclaims", _claim("team-a", "work", "pvc-other")
    )
    where = env["tmp"] / "backups" / "20261125T000000Z"
    where.mkdir(parents=True)

    dry = _run(env, "--check")
    assert dry.returncode == 0, dry.stdout[-4000:]
    assert not (where / "runai-backend-volumes.json").exists()

    first = _run(env)
    assert first.returncode == 0, first.stdout[-4000:]
    record = json.loads((where / "runai-backend-volumes.json").read_text())
    assert record["namespace"] == NS
    assert [(v["claim"], v["volume"], v["storage_class"], v["source"]) for v in record["volumes"]] == [
        (
            f"{NS}/data-runai-backend-postgresql-0",
            "pvc-pg",
            "nfs-client",
            "nfs 10.77.0.11:/srv/nfs/runai-backend-data-pg",
        )
    ]
    assert (where / "runai-backend-volumes.json").stat().st_mode & 0o777 == 0o600

    again = _run(env)
    assert again.returncode == 0 and localhost_changed(again.stdout) == 0, again.stdout[-4000:]
