"""`appliance backup` on the installed session lab: one root-only directory on the master with an
etcd snapshot etcdctl can read back, every helm release's values, kubeadm's ClusterConfiguration,
and sha256 sums that check; the command names the directory and every file, and prints no value."""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.usefixtures("installs")

ETCDCTL = (
    "etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt "
    "--cert=/etc/kubernetes/pki/etcd/server.crt --key=/etc/kubernetes/pki/etcd/server.key"
)


@pytest.fixture(scope="module")
def backup(site, cli):
    run = cli("backup", "--site", str(site.site_dir), timeout=600)
    assert run.rc == 0, run.out[-2000:] + run.err[-2000:]
    m = re.search(r"^backup on \S+: (/var/lib/appliance/backups/\S+) \((\d+) files", run.out, re.M)
    assert m, run.out[-2000:]
    return run, m.group(1), int(m.group(2))


def test_the_backup_is_root_only_and_its_sums_check(site, hosts, backup):
    _, where, count = backup
    m = hosts[site.master.name]
    assert m.file(where).mode == 0o700 and m.file(where).user == "root"
    modes = m.check_output(f"find {where} -type f -printf '%m %P\\n'").splitlines()
    assert len(modes) == count + 1  # + SHA256SUMS
    assert all(line.startswith("600 ") for line in modes), modes
    assert m.run(f"cd {where} && sha256sum --quiet -c SHA256SUMS").rc == 0


def test_the_snapshot_reads_back_with_etcdctl(site, hosts, backup):
    _, where, _ = backup
    m = hosts[site.master.name]
    etcd = m.check_output("crictl ps --name '^etcd$' -q").strip()
    status = json.loads(
        m.check_output(f"crictl exec {etcd} {ETCDCTL} snapshot status {where}/etcd-snapshot.db -w json")
    )
    assert status["revision"] > 0 and status["totalKey"] > 0, status


def test_every_release_has_its_values_and_none_is_printed(site, hosts, backup):
    run, where, _ = backup
    m = hosts[site.master.name]
    releases = json.loads(m.check_output("helm --kubeconfig /etc/kubernetes/admin.conf list -A -o json"))
    assert releases, "no helm release to back up"
    for r in releases:
        values = f"helm-values/{r['namespace']}_{r['name']}.yaml"
        assert f"  {values}" in run.out
        live = m.check_output(
            f"helm --kubeconfig /etc/kubernetes/admin.conf get values {r['name']} -n {r['namespace']} -o yaml"
        )
        assert m.check_output(f"cat {where}/{values}") == live
        assert live.strip() in ("", "null", "{}") or live.strip() not in run.out + run.err
    assert f"{where}/kubeadm-cluster-configuration.yaml" not in run.err
    assert "kubernetesVersion" in m.check_output(f"cat {where}/kubeadm-cluster-configuration.yaml")
