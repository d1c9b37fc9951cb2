"""cluster_backup on the installed lab's master (backup named "molecule"), read back (testinfra)."""

import json

WHERE = "/var/lib/appliance/backups/molecule"
KUBECONFIG = "/etc/kubernetes/admin.conf"
ETCDCTL = (
    "etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt "
    "--cert=/etc/kubernetes/pki/etcd/server.crt --key=/etc/kubernetes/pki/etcd/server.key"
)


def test_the_backup_is_root_only_and_its_sums_check(host):
    d = host.file(WHERE)
    assert d.is_directory and d.user == "root" and d.mode == 0o700
    modes = host.check_output(f"find {WHERE} -type f -printf '%m %P\\n'").splitlines()
    assert modes and all(line.startswith("600 ") for line in modes), modes
    assert host.run(f"cd {WHERE} && sha256sum --quiet -c SHA256SUMS").rc == 0


def test_the_etcd_snapshot_reads_back(host):
    etcd = host.check_output("crictl ps --name '^etcd$' -q").strip()
    out = host.check_output(f"crictl exec {etcd} {ETCDCTL} snapshot status {WHERE}/etcd-snapshot.db -w json")
    status = json.loads(out)
    assert status["revision"] > 0 and status["totalKey"] > 0, status


def test_every_release_has_its_values_and_the_cluster_configuration_is_kept(host):
    releases = json.loads(host.check_output(f"helm --kubeconfig {KUBECONFIG} list -A -o json"))
    assert releases, "the installed lab has helm releases"
    kept = json.loads(host.check_output(f"cat {WHERE}/helm-releases.json"))
    assert sorted(r["name"] for r in kept) == sorted(r["name"] for r in releases)
    for r in releases:
        live = host.check_output(
            f"helm --kubeconfig {KUBECONFIG} get values {r['name']} -n {r['namespace']} -o yaml"
        )
        assert host.check_output(f"cat {WHERE}/helm-values/{r['namespace']}_{r['name']}.yaml") == live
    assert "kubernetesVersion" in host.check_output(f"cat {WHERE}/kubeadm-cluster-configuration.yaml")
