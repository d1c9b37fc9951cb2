"""helm on the lab: installed from the bundle at the pinned version, on the master only."""

import pytest


@pytest.fixture
def on_master(host):
    v = host.ansible.get_variables()
    if "masters" not in v["group_names"]:
        pytest.skip("helm runs on the master")
    return v


def test_helm_is_the_pinned_version(host, on_master):
    assert host.check_output("/usr/local/bin/helm version --short").startswith("v3.14.4")
    f = host.file("/usr/local/bin/helm")
    assert f.mode == 0o755 and f.user == "root"


def test_helm_reaches_the_cluster(host, on_master):
    assert host.run("helm --kubeconfig /etc/kubernetes/admin.conf list -A -o json").rc == 0
