"""storage_nfs on the lab: NFS clients on every node, the export left clean, the provisioner
release and the default StorageClass on the master."""

import json

import pytest

KUBECONFIG = "/etc/kubernetes/admin.conf"


@pytest.fixture
def v(host):
    return host.ansible.get_variables()


def test_clients_on_every_node(host):
    for pkg in ("nfs-common", "libnfs-utils"):
        assert host.package(pkg).is_installed, pkg


def test_the_export_is_reachable_and_no_probe_file_is_left(host, v):
    url = f"nfs://{v['appliance_nfs_server']}{v['appliance_nfs_path']}?uid=0&gid=0"
    listing = host.check_output(f"nfs-ls '{url}'")
    assert ".appliance-probe-" not in listing


def test_release_and_default_storage_class_on_the_master(host, v):
    if "masters" not in v["group_names"]:
        pytest.skip("the release and the StorageClass are the master's")
    [rel] = json.loads(host.check_output(f"helm --kubeconfig {KUBECONFIG} -n nfs-provisioner list -o json"))
    assert (rel["name"], rel["status"]) == ("nfs-subdir-external-provisioner", "deployed")
    sc = json.loads(
        host.check_output(f"kubectl --kubeconfig {KUBECONFIG} get storageclass nfs-client -o json")
    )
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert host.file("/etc/appliance/helm/nfs-subdir-external-provisioner.values.yaml").mode == 0o600
