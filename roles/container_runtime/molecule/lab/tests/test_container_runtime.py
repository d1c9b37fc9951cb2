"""container_runtime on the lab's nodes, read back from the running node (testinfra)."""

import tomllib


def _vars(host):
    return host.ansible.get_variables()


def test_containerd_is_installed_enabled_and_running(host):
    assert host.package("containerd").is_installed
    svc = host.service("containerd")
    assert svc.is_enabled
    assert svc.is_running


def test_config_toml_has_what_kubeadm_needs(host):
    registry = _vars(host)["appliance_registry_address"]
    cfg = tomllib.loads(host.file("/etc/containerd/config.toml").content_string)
    assert cfg["version"] == 2
    cri = cfg["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == f"{registry}/pause:3.6"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert cri["cni"]["bin_dir"] == "/opt/cni/bin"
    assert cri["registry"]["config_path"] == "/etc/containerd/certs.d"


def test_registry_hosts_toml_trusts_the_registry_ca(host):
    registry = _vars(host)["appliance_registry_address"]
    hosts = tomllib.loads(host.file(f"/etc/containerd/certs.d/{registry}/hosts.toml").content_string)
    assert hosts["server"] == f"https://{registry}"
    ca = next(iter(hosts["host"].values()))["ca"]
    assert host.file(ca).contains("BEGIN CERTIFICATE")


def test_the_running_daemon_answers_with_the_cri_plugin_loaded(host):
    """Asked over the socket, not read from the config: the CRI plugin is up (status ok)."""
    out = host.check_output("ctr --address /run/containerd/containerd.sock plugins ls")
    cri = [line.split() for line in out.splitlines() if line.split()[:2] == ["io.containerd.grpc.v1", "cri"]]
    assert cri and cri[0][-1] == "ok", out
    assert host.socket("unix:///run/containerd/containerd.sock").is_listening
