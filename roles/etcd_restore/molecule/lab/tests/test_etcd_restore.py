"""etcd_restore on the installed lab's master: the backup "molecule" restored (testinfra)."""

import json

NEW = "/var/lib/etcd-restore-molecule"
KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"


def test_the_restore_finished_and_recorded_where_etcd_now_runs(host):
    doc = json.loads(host.check_output("cat /var/lib/appliance/restore/state.json"))
    assert doc["schema"] == 1 and set(doc) == {"schema", "etcd_restore"}, (
        doc
    )  # module resumable_state's layout
    state = doc["etcd_restore"]
    assert state["phase"] == "done" and state["backup"] == "molecule", state
    assert state["data_dir"] == NEW and state["old_data_dir"] == "/var/lib/etcd", state


def test_etcd_runs_from_the_new_data_dir_and_the_old_one_is_kept(host):
    manifest = host.file("/etc/kubernetes/manifests/etcd.yaml").content_string
    assert f"--data-dir={NEW}\n" in manifest and f"path: {NEW}\n" in manifest
    assert host.file(NEW).is_directory
    assert host.file("/var/lib/etcd").is_directory  # kept, never deleted


def test_the_cluster_answers_with_every_node_ready(host):
    nodes = json.loads(host.check_output(f"{KUBECTL} get nodes -o json"))["items"]
    ready = {
        n["metadata"]["name"]: any(
            c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]
        )
        for n in nodes
    }
    assert ready and all(ready.values()), ready
