"""Preflight checks on probe output as a real node prints it (probe.sh's key=value lines): each
check's verdict, the value it measured, and that container nodes skip what they cannot show."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest

from appliance_cli.core.checks.model import NodeFacts, Status
from appliance_cli.core.checks.preflight import node_results, site_checks
from appliance_cli.core.checks.probe import parse
from appliance_cli.core.siteconfig import SiteConfig, load_site
from tests._support.paths import EXAMPLE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
PROBE_SH = Path(__file__).resolve().parents[2] / "appliance_cli" / "core" / "checks" / "probe.sh"


def _xml_line(fixture: str) -> str:
    """probe.sh's gpu_xml_b64 line for one of the nvidia-smi -q -x fixtures."""
    return "gpu_xml_b64=" + base64.b64encode((FIXTURES / fixture).read_bytes()).decode() + "\n"


# A healthy GZ2 GPU worker on bare metal, as probe.sh prints it (8 A100s, driver on the host).
BARE_GPU_NODE = """probe_version=1
hostname=gpu2
product_uuid=4c4c4544-0047-3510-8052-b4c04f4e3732
machine_id=0a1b2c3d4e5f
virt=none
virt_type=none
os_id=ubuntu
os_version_id=20.04
os_pretty=Ubuntu 20.04.6 LTS
time=1795466685.0
nproc=128
mem_kb=1056000000
disk_free_bytes=900000000000
mac.ens1f0=b8:ce:f6:01:02:03
operstate.ens1f0=up
speed.ens1f0=25000
nouveau_loaded=no
nouveau_blacklisted=blacklist nouveau
secure_boot=disabled
swap_entries=0
ip_forward=1
bridge_nf_call_iptables=1
cgroup_fs=tmpfs
""" + "".join(f"tool.{t}=/usr/bin/{t}\n" for t in (["conntrack", "ip", "iptables", "mount", "nsenter", "ebtables", "ethtool", "socat", "tc", "touch"])) + (
    "".join(f"gpu_pci=0000:{i:02x}:00.0 0x20b2\ngpu_smi=NVIDIA A100-SXM4-80GB, 550.90.07\n" for i in range(8))
    + _xml_line("gz2-healthy.xml")
    + "cri_socket=absent\nkubelet_conf=absent\nmanifests=0\nport=22\n"
    + "resolve.master1=192.168.10.11\nresolve.gpu1=192.168.10.21\nresolve.gpu2=192.168.10.22\n"
    + "resolve.runai.acme.example=192.168.10.100\nprobe_end=1\n"
)  # fmt: skip


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> SiteConfig:
    """The example site with the driver on the hosts, as BARE_GPU_NODE has it."""
    d = tmp_path_factory.mktemp("site")
    shutil.copy(EXAMPLE, d / "appliance.yml")
    site = load_site(d)
    return site.model_copy(update={"gpu": site.gpu.model_copy(update={"driver": "host"})})


def _facts(text: str, node: str = "gpu2", **changes: str) -> NodeFacts:
    f = parse(node, text)
    for key, value in changes.items():
        key = key.replace("__", ".")
        if value is None:
            f.values.pop(key, None)
        else:
            f.values[key] = value
    return f


def _by_check(cfg: SiteConfig, facts: NodeFacts, node: str = "gpu2") -> dict[str, tuple[Status, str, str]]:
    return {r.check: (r.status, r.value, r.hint) for r in node_results(cfg, cfg.node(node), facts)}


def test_a_healthy_bare_metal_gpu_worker_passes_everything(cfg: SiteConfig) -> None:
    res = _by_check(cfg, _facts(BARE_GPU_NODE))
    # before the install: containerd, the registry and the NFS client are what it will bring
    assert {k: v[0] for k, v in res.items() if v[0] is not Status.PASS} == {
        "cri_socket": Status.WARN,
        "registry": Status.SKIP,
        "nfs_export": Status.SKIP,
    }
    assert res["gpus"][1] == "8 NVIDIA PCI device(s): 8 x NVIDIA A100-SXM4-80GB"
    assert res["nic_speed"][1] == "25000 Mb/s (ens1f0)"


def test_missing_gpu_fails_with_the_counts(cfg: SiteConfig) -> None:
    text = BARE_GPU_NODE.replace("gpu_pci=0000:07:00.0 0x20b2\n", "")
    status, value, _ = _by_check(cfg, _facts(text))["gpus"]
    assert status is Status.FAIL and value.startswith("7 NVIDIA PCI device(s)")


def test_wrong_gpu_model_fails(cfg: SiteConfig) -> None:
    text = BARE_GPU_NODE.replace("A100-SXM4-80GB", "A6000", 1)
    status, value, _ = _by_check(cfg, _facts(text))["gpus"]
    assert status is Status.FAIL and "A6000" in value


def test_slow_link_fails_against_the_hardware_class(cfg: SiteConfig) -> None:
    status, value, _ = _by_check(cfg, _facts(BARE_GPU_NODE, speed__ens1f0="10000"))["nic_speed"]
    assert (status, value) == (Status.FAIL, "10000 Mb/s (ens1f0)")


def test_loaded_nouveau_fails_and_secure_boot_warns(cfg: SiteConfig) -> None:
    res = _by_check(cfg, _facts(BARE_GPU_NODE, nouveau_loaded="yes", secure_boot="enabled"))
    assert res["nouveau"][0] is Status.FAIL and "reboot" in res["nouveau"][2]
    assert res["secure_boot"][0] is Status.WARN


def test_too_little_memory_for_kubeadm_fails(cfg: SiteConfig) -> None:
    status, value, _ = _by_check(cfg, _facts(BARE_GPU_NODE, mem_kb=str(1024 * 1024)))["memory"]
    assert status is Status.FAIL and value == "1 GiB"


def test_small_disk_fails(cfg: SiteConfig) -> None:
    status, value, _ = _by_check(cfg, _facts(BARE_GPU_NODE, disk_free_bytes="50000000000"))["disk"]
    assert status is Status.FAIL and value == "50 GB free in /var/lib"


def test_busy_kubelet_port_fails_before_install_and_passes_after(cfg: SiteConfig) -> None:
    busy = BARE_GPU_NODE.replace("port=22\n", "port=22\nport=10250\n")
    assert _by_check(cfg, _facts(busy))["ports"][:2] == (Status.FAIL, "in use: 10250")
    assert _by_check(cfg, _facts(busy, kubelet_conf="present"))["ports"][0] is Status.PASS


def test_master_ports_include_the_api_server(cfg: SiteConfig) -> None:
    text = BARE_GPU_NODE.replace("hostname=gpu2", "hostname=master1").replace("port=22\n", "port=6443\n")
    res = _by_check(
        cfg, _facts(text, "master1", **{"path__/media/appliance-usb/bundle": "present"}), "master1"
    )
    assert res["ports"][:2] == (Status.FAIL, "in use: 6443")
    assert res["bundle"][0] is Status.PASS


def test_no_bundle_on_the_master_fails(cfg: SiteConfig) -> None:
    text = BARE_GPU_NODE.replace("hostname=gpu2", "hostname=master1")
    status, _, hint = _by_check(cfg, _facts(text, "master1"), "master1")["bundle"]
    assert status is Status.FAIL and "/media/appliance-usb/bundle" in hint


def test_tools_the_install_provides_warn_base_tools_fail(cfg: SiteConfig) -> None:
    res = _by_check(cfg, _facts(BARE_GPU_NODE, tool__conntrack=""))
    assert res["tools"][:2] == (Status.WARN, "missing: conntrack")
    res = _by_check(cfg, _facts(BARE_GPU_NODE, tool__nsenter=""))
    assert res["tools"][0] is Status.FAIL and "util-linux" in res["tools"][2]


def test_a_name_resolving_elsewhere_fails(cfg: SiteConfig) -> None:
    status, value, _ = _by_check(cfg, _facts(BARE_GPU_NODE, resolve__gpu1="192.168.10.99"))["name_resolution"]
    assert status is Status.FAIL and value == "gpu1 -> 192.168.10.99 (site: 192.168.10.21)"


def test_container_nodes_skip_what_they_cannot_measure(cfg: SiteConfig) -> None:
    res = _by_check(cfg, _facts(BARE_GPU_NODE, virt="systemd-nspawn", virt_type="container"))
    for check in ("cpu", "memory", "disk", "nouveau", "secure_boot"):
        assert res[check][0] is Status.SKIP and res[check][2].startswith("container node: "), check


def test_an_unreachable_node_is_one_failure_naming_the_cause(cfg: SiteConfig) -> None:
    facts = NodeFacts(
        "gpu1",
        error="192.168.10.21: SSH cannot connect: connect to host 192.168.10.21 port 22: No route to host",
    )
    [r] = node_results(cfg, cfg.node("gpu1"), facts)
    assert (r.check, r.status) == ("reachable", Status.FAIL) and "No route to host" in r.value


def test_duplicates_across_nodes_are_named(cfg: SiteConfig) -> None:
    a = _facts(BARE_GPU_NODE, "gpu1")
    b = _facts(
        BARE_GPU_NODE, "gpu2", mac__ens1f0="b8:ce:f6:09:09:09", machine_id="other", product_uuid="other"
    )
    res = {r.check: r for r in site_checks({"gpu1": a, "gpu2": b})}
    assert (
        res["unique_hostname"].status is Status.FAIL and res["unique_hostname"].value == "gpu2 on gpu1, gpu2"
    )
    assert res["unique_mac"].status is Status.PASS and res["unique_product_uuid"].status is Status.PASS


def test_clock_skew_between_nodes(cfg: SiteConfig) -> None:
    now = 1795466685.0
    a, b = _facts(BARE_GPU_NODE, "gpu1", time=str(now)), _facts(BARE_GPU_NODE, "gpu2", time=str(now + 90))
    for f in (a, b):
        f.received_at, f.rtt_s = now, 0.0
    skew = next(r for r in site_checks({"gpu1": a, "gpu2": b}) if r.check == "time_skew")
    assert skew.status is Status.FAIL and skew.value == "90.00 s (gpu2 ahead of gpu1)"


def test_probe_output_cut_short_is_an_error() -> None:
    assert parse("gpu1", "hostname=gpu1\n").error and not parse("gpu1", "probe_end=1\n").error


def test_probe_script_is_posix_sh() -> None:
    import subprocess

    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    r = subprocess.run(["shellcheck", "-s", "sh", str(PROBE_SH)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_the_same_finding_on_several_nodes_is_shown_once_naming_them(cfg: SiteConfig) -> None:
    from appliance_cli.cli.preflight_cmd import grouped

    results = []
    for node in ("gpu2", "gpu1"):
        results += node_results(cfg, cfg.node(node), _facts(BARE_GPU_NODE, node, tool__socat=""))
    results += node_results(cfg, cfg.node("gpu1"), _facts(BARE_GPU_NODE, "gpu1", disk_free_bytes="1"))
    shown = [(who, r.check) for who, r in grouped(results)]
    assert ("2 nodes (gpu1, gpu2)", "tools") in shown and ("gpu1", "disk") in shown
    assert len([1 for _, check in shown if check == "tools"]) == 1


@pytest.mark.parametrize(
    ("anon", "auth", "status", "words"),
    [
        ("not-installed", None, Status.SKIP, "not installed yet"),
        ("401", "200", Status.PASS, "pull credentials accepted"),
        ("401", None, Status.PASS, "answers, TLS trusted"),
        ("000", None, Status.FAIL, "does not answer"),  # the registry stopped
        ("200", None, Status.FAIL, "HTTP 200 without credentials"),  # anonymous pulls allowed
        ("401", "401", Status.FAIL, "pull credentials refused"),
    ],
)
def test_the_registry_once_installed(cfg: SiteConfig, anon, auth, status, words) -> None:
    changes = {"registry_anon": anon} | ({"registry_auth": auth} if auth else {})
    got = _by_check(cfg, _facts(BARE_GPU_NODE, **changes))["registry"]
    assert got[0] is status and (words in got[1] or words in got[2]), got


def test_registry_paths_are_the_registry_roles_defaults() -> None:
    import yaml

    from appliance_cli.core.checks.preflight import REGISTRY_CA_TRUST, REGISTRY_PASSWORD_FILE
    from appliance_cli.core.paths import PATHS

    # both sides take them from the paths contract (tests/unit/test_paths_contract.py renders them)
    d = yaml.safe_load((Path(__file__).resolve().parents[2] / "roles/registry/defaults/main.yml").read_text())
    assert d["registry_ca_trust_path"] == "{{ appliance_paths_registry_ca }}"
    assert d["registry_auth_password_file"] == "{{ appliance_paths_registry_password }}"
    assert (PATHS.registry_ca, PATHS.registry_password) == (REGISTRY_CA_TRUST, REGISTRY_PASSWORD_FILE)


def test_a_stopped_registry_does_not_block_the_install_that_restarts_it(cfg: SiteConfig) -> None:
    facts = _facts(BARE_GPU_NODE, registry_anon="000")
    [r] = [
        r for r in node_results(cfg, cfg.node("gpu2"), facts, before_install=True) if r.check == "registry"
    ]
    assert r.status is Status.WARN and r.hint.startswith("the install's registry role repairs it")


def _mixed_cfg(tmp_path: Path) -> SiteConfig:
    """The example site with gpu2's class holding two A6000s and two A100s (the guide's S5N worker)."""
    import yaml

    data = yaml.safe_load(EXAMPLE.read_text())
    data["hardware_classes"]["GZ2"]["gpus"] = [
        {"model": "NVIDIA RTX A6000", "count": 2},
        {"model": "NVIDIA A100-PCIE-40GB", "count": 2},
    ]
    data["scheduler"].pop("projects", None)  # their quotas count on GZ2's eight GPUs
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    return load_site(tmp_path)


def _gpu_lines(models: list[str]) -> str:
    return "".join(
        f"gpu_pci=0000:{i:02x}:00.0 0x2230\ngpu_smi={m}, 550.90.07\n" for i, m in enumerate(models)
    )


def _with_gpus(models: list[str]) -> str:
    head, _, tail = BARE_GPU_NODE.partition("gpu_pci=")
    tail = tail[tail.index("cri_socket=") :]
    return head + _gpu_lines(models) + tail


def test_a_class_with_two_gpu_models_is_checked_per_model(tmp_path: Path) -> None:
    cfg = _mixed_cfg(tmp_path)
    good = ["NVIDIA RTX A6000", "NVIDIA A100-PCIE-40GB", "NVIDIA RTX A6000", "NVIDIA A100-PCIE-40GB"]
    status, value, _ = _by_check(cfg, _facts(_with_gpus(good)))["gpus"]
    assert status is Status.PASS
    assert value == "4 NVIDIA PCI device(s): 2 x NVIDIA RTX A6000 + 2 x NVIDIA A100-PCIE-40GB"
    # four GPUs, the right total, but three A6000s: one A100 slot holds the wrong card
    swapped = ["NVIDIA RTX A6000"] * 3 + ["NVIDIA A100-PCIE-40GB"]
    status, value, _ = _by_check(cfg, _facts(_with_gpus(swapped)))["gpus"]
    assert status is Status.FAIL
    assert value == "4 NVIDIA PCI device(s): 3 x NVIDIA RTX A6000 + 1 x NVIDIA A100-PCIE-40GB"
    status, value, _ = _by_check(cfg, _facts(_with_gpus([*good[:3], "NVIDIA L40S"])))["gpus"]
    assert status is Status.FAIL and value.endswith("+ 1 x NVIDIA L40S")


def test_the_one_model_shorthand_and_the_list_are_the_same_class(tmp_path: Path) -> None:
    import yaml

    from appliance_cli.core.siteconfig import parse_site
    from appliance_cli.errors import ConfigError

    data = yaml.safe_load(EXAMPLE.read_text())
    data["hardware_classes"]["GZ2"].pop("gpus")
    data["hardware_classes"]["GZ2"].update(gpu_model="NVIDIA A100-SXM4-80GB", gpu_count=8)
    hw = parse_site(data).hardware_classes["GZ2"]
    assert [(g.model, g.count) for g in hw.gpus] == [("NVIDIA A100-SXM4-80GB", 8)] and hw.gpu_total == 8
    data["hardware_classes"]["GZ2"]["gpus"] = [{"model": "NVIDIA A100-SXM4-80GB", "count": 8}]
    with pytest.raises(
        ConfigError,
        match=r"hardware_classes\.GZ2: .*gpus: \[\{model, count\}\] or gpu_model \+ gpu_count, not both",
    ):
        parse_site(data)


# --- storage: the site's NFS export (example site: 192.168.10.5:/export/runai, Run:ai) ---------


def test_nfs_before_the_client_is_installed_is_a_skip_saying_so(cfg: SiteConfig) -> None:
    status, _, hint = _by_check(cfg, _facts(BARE_GPU_NODE, nfs="no-client"))["nfs_export"]
    assert status is Status.SKIP and hint.startswith("libnfs-utils (nfs-ls, nfs-cp) is not installed yet")


@pytest.mark.parametrize(
    ("state", "detail", "value", "hint"),
    [
        ("ok", None, "reachable, writable", ""),
        ("unreachable", "no answer within 8s", "192.168.10.5:/export/runai not reachable (no answer within 8s)",
         "check the filer exports /export/runai to gpu2 (192.168.10.22)"),
        ("read-only", 'Failed to creat file /.appliance-preflight-gpu2: creat call failed with "NFS: CREATE of '
         '/.appliance-preflight-gpu2 failed with NFS3ERR_ROFS(-30)"', "192.168.10.5:/export/runai read-only (NFS3ERR_ROFS(-30))",
         "export /export/runai read-write"),
        ("not-writable", "NFS3ERR_ACCES(-13)", "192.168.10.5:/export/runai not writable (NFS3ERR_ACCES(-13))",
         "root not squashed"),
    ],
)  # fmt: skip
def test_nfs_export_from_each_node(cfg: SiteConfig, state, detail, value, hint) -> None:
    status, got_value, got_hint = _by_check(cfg, _facts(BARE_GPU_NODE, nfs=state, nfs_detail=detail))[
        "nfs_export"
    ]
    assert status is (Status.PASS if state == "ok" else Status.FAIL)
    assert got_value == value and hint in got_hint


def test_nfs_space_is_checked_on_the_master_only(cfg: SiteConfig) -> None:
    small = _facts(BARE_GPU_NODE.replace("hostname=gpu2", "hostname=master1"), "master1", nfs="ok",
                   nfs_free_bytes="50000000000")  # fmt: skip
    assert "nfs_space" not in _by_check(cfg, _facts(BARE_GPU_NODE, nfs="ok", nfs_free_bytes="5"))
    status, value, _ = _by_check(cfg, small, "master1")["nfs_space"]
    assert (status, value) == (Status.FAIL, "50.0 GB free on 192.168.10.5:/export/runai")  # Run:ai: a failure
    big = _facts(BARE_GPU_NODE, "master1", nfs="ok", nfs_free_bytes="244969041920")
    assert _by_check(cfg, big, "master1")["nfs_space"][:2] == (Status.PASS, "245 GB free")
    unknown = _facts(BARE_GPU_NODE, "master1", nfs="no-client")
    assert _by_check(cfg, unknown, "master1")["nfs_space"][0] is Status.SKIP


def test_no_nfs_in_the_site_no_storage_checks(tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load(EXAMPLE.read_text())
    data.pop("nfs")
    data["scheduler"]["stack"] = "open"
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    cfg = load_site(tmp_path)
    res = _by_check(cfg, _facts(BARE_GPU_NODE, nfs="unreachable"))
    assert "nfs_export" not in res and "nfs_space" not in res
    from appliance_cli.core.checks.preflight import probe_args

    assert not [a for a in probe_args(cfg, cfg.node("gpu2")) if a.startswith("nfs=")]


def test_the_probe_is_asked_for_the_export_with_a_per_node_file(cfg: SiteConfig) -> None:
    from appliance_cli.core.checks.preflight import probe_args

    assert "nfs=192.168.10.5,.appliance-preflight-gpu2,/export/runai" in probe_args(cfg, cfg.node("gpu2"))


def test_the_gpus_state_from_nvidia_smi_xml_names_each_broken_gpu(cfg: SiteConfig) -> None:
    """The degraded fixture (tests/fixtures/gpu/README.md): GPU 47 held at PCIe gen 3 on a gen 4
    class, 87 at x8, 90 with uncorrected ECC errors and a row remapping pending, B7 without
    persistence and a MIG change pending, BD with one uncorrected error in its life."""
    text = BARE_GPU_NODE.replace(_xml_line("gz2-healthy.xml"), _xml_line("gz2-degraded.xml"))
    res = _by_check(cfg, _facts(text))
    assert res["gpu_driver"] == (Status.PASS, "driver 550.90.07, 8 GPUs", "")
    assert res["gpu_pcie"][:2] == (
        Status.FAIL,
        "00000000:47:00.0: PCIe gen 3 at most (hardware class: gen 4); 00000000:87:00.0: PCIe x8 of x16",
    )
    assert "BIOS" in res["gpu_pcie"][2]
    assert res["gpu_ecc"][:2] == (
        Status.FAIL,
        "00000000:90:00.0: 2 uncorrected ECC errors since the driver loaded; "
        "00000000:BD:00.0: 1 uncorrected ECC error in its life",
    )
    assert res["gpu_memory"][:2] == (Status.FAIL, "00000000:90:00.0: row remapping pending")
    assert "nvidia-smi -r" in res["gpu_memory"][2]
    assert res["gpu_persistence"][:2] == (Status.WARN, "00000000:B7:00.0: persistence mode off")
    assert res["gpu_mig"][:2] == (Status.WARN, "00000000:B7:00.0: MIG mode off, on after a reset")
    healthy = _by_check(cfg, _facts(BARE_GPU_NODE))
    assert {k: v[:2] for k, v in healthy.items() if k.startswith("gpu_")} == {
        "gpu_driver": (Status.PASS, "driver 550.90.07, 8 GPUs"),
        **{f"gpu_{k}": (Status.PASS, "8 GPUs") for k in ("pcie", "ecc", "memory", "persistence", "mig")},
    }


def test_a_host_driver_on_a_driver_container_site_fails(cfg: SiteConfig) -> None:
    container = cfg.model_copy(update={"gpu": cfg.gpu.model_copy(update={"driver": "container"})})
    status, value, hint = _by_check(container, _facts(BARE_GPU_NODE))["gpu_driver"]
    assert (status, value) == (Status.FAIL, "host driver 550.90.07 (nvidia-smi on the host)")
    assert "driver container" in hint and "gpu.driver: host" in hint
    # before the install, a container site's GPU node has no driver at all: that is right
    bare = "".join(
        ln + "\n" for ln in BARE_GPU_NODE.splitlines() if not ln.startswith(("gpu_smi=", "gpu_xml_b64="))
    )
    assert _by_check(container, _facts(bare))["gpu_driver"][:2] == (Status.PASS, "no host driver")
    # the host site without one fails; a reply that is no XML is named
    assert _by_check(cfg, _facts(bare))["gpu_driver"][:2] == (Status.FAIL, "no nvidia-smi on the host")
    broken = BARE_GPU_NODE.replace(_xml_line("gz2-healthy.xml"), "gpu_xml_b64=PG5vdCB4bWw=\n")  # "<not xml"
    status, value, _ = _by_check(cfg, _facts(broken))["gpu_driver"]
    assert status is Status.FAIL and value.startswith("nvidia-smi -q -x: not XML")


INSTALLED = {"kubelet_conf": "present"}


def test_an_earlier_clusters_cni_configuration_and_etcd_data_fail_before_the_install(cfg: SiteConfig) -> None:
    flannel = "cni_conf=10-flannel.conflist flannel\n"
    calico = "cni_conf=10-calico.conflist other\n"
    assert _by_check(cfg, _facts(BARE_GPU_NODE + flannel))["leftovers"][:2] == (Status.PASS, "none")
    status, value, hint = _by_check(cfg, _facts(BARE_GPU_NODE + flannel + calico))["leftovers"]
    assert (status, value) == (Status.FAIL, "/etc/cni/net.d/10-calico.conflist")
    assert "kubeadm reset -f" in hint and "keeps CNI configuration" in hint
    master = BARE_GPU_NODE.replace("hostname=gpu2", "hostname=master1") + "entries./var/lib/etcd=1\n"
    status, value, _ = _by_check(cfg, _facts(master, node="master1"), node="master1")["leftovers"]
    assert (status, value) == (Status.FAIL, "/var/lib/etcd (not empty)")
    # a worker's etcd directory is not asked for; an installed node's files are its own
    assert _by_check(cfg, _facts(BARE_GPU_NODE + "entries./var/lib/etcd=3\n"))["leftovers"][0] is Status.PASS
    assert "leftovers" not in _by_check(cfg, _facts(BARE_GPU_NODE + calico, **INSTALLED))


def test_the_cgroup_driver_the_kubelet_and_the_runtime_are_set_to(cfg: SiteConfig) -> None:
    def verdict(kubelet: str, containerd: str, **extra: str) -> tuple[Status, str]:
        text = BARE_GPU_NODE + f"cgroup_driver.kubelet={kubelet}\ncgroup_driver.containerd={containerd}\n"
        return _by_check(cfg, _facts(text, **extra))["cgroup_driver"][:2]

    assert verdict("absent", "absent") == (Status.PASS, "kubelet absent, containerd absent")  # a fresh node
    assert verdict("absent", "cgroupfs")[0] is Status.WARN  # the install rewrites containerd's
    assert verdict("systemd", "systemd", **INSTALLED) == (Status.PASS, "kubelet systemd, containerd systemd")
    assert verdict("cgroupfs", "systemd", **INSTALLED) == (
        Status.FAIL,
        "kubelet cgroupfs, containerd systemd",
    )
    assert verdict("systemd", "unset", **INSTALLED) == (Status.FAIL, "kubelet systemd, containerd unset")
    _, _, hint = _by_check(cfg, _facts(BARE_GPU_NODE + "cgroup_driver.kubelet=cgroupfs\n", **INSTALLED))[
        "cgroup_driver"
    ]
    assert "appliance install --limit gpu2" in hint


def test_a_host_driver_other_than_the_class_says_fails(cfg: SiteConfig) -> None:
    gz2 = cfg.hardware_classes["GZ2"].model_copy(update={"driver_version": "550.54.15"})
    declared = cfg.model_copy(update={"hardware_classes": {**cfg.hardware_classes, "GZ2": gz2}})
    status, value, hint = _by_check(declared, _facts(BARE_GPU_NODE))["gpu_driver"]
    assert (status, value) == (Status.FAIL, "driver 550.90.07, 8 GPUs") and "driver_version" in hint
    gz2 = gz2.model_copy(update={"driver_version": "550.90.07"})
    right = cfg.model_copy(update={"hardware_classes": {**cfg.hardware_classes, "GZ2": gz2}})
    assert _by_check(right, _facts(BARE_GPU_NODE))["gpu_driver"][0] is Status.PASS


def _nfd_site(cfg: SiteConfig, nfd: bool) -> SiteConfig:
    return cfg.model_copy(update={"gpu": cfg.gpu.model_copy(update={"nfd": nfd})})


@pytest.mark.parametrize(
    ("nfd", "lines", "installed", "status", "words"),
    [
        (True, [], False, Status.PASS, "none of another"),
        (True, ["nfd-worker namespace gpu-operator"], True, Status.PASS, "none of another"),  # the operator's own
        (True, ["nfd-worker host"], False, Status.FAIL, "nfd-worker (outside Kubernetes)"),
        (True, ["nfd-master namespace node-feature-discovery", "nfd-worker pod"], True, Status.FAIL,
         "nfd-master (namespace node-feature-discovery), nfd-worker (a pod)"),
        (False, ["nfd-worker namespace node-feature-discovery"], True, Status.PASS, "node-feature-discovery"),
        (False, [], False, Status.PASS, "none yet"),
        (False, [], True, Status.WARN, "none runs"),  # installed, and nothing labels the GPU node
    ],
)  # fmt: skip
def test_a_node_feature_discovery_of_another_is_named_with_the_value_to_set(
    cfg: SiteConfig, nfd: bool, lines: list[str], installed: bool, status: Status, words: str
) -> None:
    text = BARE_GPU_NODE.replace("probe_end=1\n", "".join(f"nfd={x}\n" for x in lines) + "probe_end=1\n")
    facts = _facts(text, kubelet_conf="present" if installed else "absent")
    got = _by_check(_nfd_site(cfg, nfd), facts)["nfd"]
    assert got[0] is status and words in got[1], got
    if status is Status.FAIL:
        assert "set gpu.nfd: false in appliance.yml" in got[2]


def test_the_probe_names_nfd_daemons_in_a_pod_by_namespace_and_on_the_host(tmp_path: Path) -> None:
    """probe.sh over a /proc and a /var/log/pods of the test's making (PROBE_PROC, PROBE_PODS):
    the pod's UID from the process's cgroup (systemd driver: underscores), its namespace from the
    kubelet's log directory; a process outside pods is the host's; other processes are not named."""
    import os
    import subprocess

    uid = "0c2b1d4e-1111-2222-3333-444455556666"
    procs = {
        "101": (
            "nfd-worker",
            f"0::/kubepods.slice/kubepods-besteffort-pod{uid.replace('-', '_')}.slice/cri-x.scope",
        ),
        "102": ("nfd-topology-up", "0::/system.slice/nfd.service"),
        "103": ("bash", "0::/user.slice"),
        "104": ("nfd-master", "0::/kubepods/burstable/pod9a9a9a9a-0000-1111-2222-333333333333/abc"),
    }
    for pid, (comm, cgroup) in procs.items():
        (tmp_path / "proc" / pid).mkdir(parents=True)
        (tmp_path / "proc" / pid / "comm").write_text(comm + "\n")
        (tmp_path / "proc" / pid / "cgroup").write_text(cgroup + "\n")
    (tmp_path / "pods" / f"nfd_nfd-worker-x7k2p_{uid}").mkdir(parents=True)
    env = {**os.environ, "PROBE_PROC": str(tmp_path / "proc"), "PROBE_PODS": str(tmp_path / "pods")}
    out = subprocess.run(["sh", str(PROBE_SH)], env=env, capture_output=True, text=True, timeout=60).stdout
    assert [ln for ln in out.splitlines() if ln.startswith("nfd=")] == [
        "nfd=nfd-worker namespace nfd", "nfd=nfd-topology-up host", "nfd=nfd-master pod"
    ]  # fmt: skip


def test_the_driver_container_against_the_driver_the_toolkit_pins(cfg: SiteConfig) -> None:
    """gpu.driver container: what nvidia-smi in the driver container's root reads against the
    toolkit's values for the operator (550.90.07): a pass, another driver and a silent one each a
    failure; none before the install is no row (the install deploys it), none after is a warning."""
    from appliance_cli.core.checks.preflight import driver_pins

    assert driver_pins() == {"v24.6.2": "550.90.07"}
    container = cfg.model_copy(update={"gpu": cfg.gpu.model_copy(update={"driver": "container"})})
    bare = "".join(
        ln + "\n" for ln in BARE_GPU_NODE.splitlines() if not ln.startswith(("gpu_smi=", "gpu_xml_b64="))
    )
    expected = "driver 550.90.07 (gpu-operator v24.6.2's values)"

    def row(extra: str = "", **changes: str) -> tuple[Status, str, str] | None:
        return _by_check(container, _facts(bare + extra, **changes)).get("gpu_container_driver")

    assert row("gpu_container_driver=550.90.07\n", **INSTALLED)[:2] == (
        Status.PASS,
        "driver container 550.90.07",
    )
    status, value, hint = row("gpu_container_driver=535.104.05\n", **INSTALLED)
    assert (status, value) == (Status.FAIL, "driver container 535.104.05")
    assert "appliance install" in hint and "nvidia-driver pod" in hint
    status, value, _ = row("gpu_container_driver=none\n")
    assert (status, value) == (Status.FAIL, "the driver container's nvidia-smi answers no version")
    assert row("gpu_container_driver=550.90.07; rm -rf /\n")[0] is Status.FAIL  # a version, or nothing
    assert row() is None  # before the install
    status, value, hint = row(**INSTALLED)
    assert (status, value) == (Status.WARN, "no driver container (nothing at /run/nvidia/driver)")
    assert "kubectl -n gpu-operator get pods" in hint
    results = node_results(
        container, container.node("gpu2"), _facts(bare + "gpu_container_driver=550.90.07\n")
    )
    assert next(r for r in results if r.check == "gpu_container_driver").expected == expected
    # a host-driver site, or a node without GPUs, has no driver container to check
    assert "gpu_container_driver" not in _by_check(cfg, _facts(BARE_GPU_NODE + "gpu_container_driver=1.0\n"))
    master = BARE_GPU_NODE.replace("hostname=gpu2", "hostname=master1") + "gpu_container_driver=1.0\n"
    assert "gpu_container_driver" not in _by_check(container, _facts(master, node="master1"), node="master1")


def test_a_values_file_without_a_driver_version_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from appliance_cli.core.checks import preflight
    from appliance_cli.errors import ApplianceError

    (tmp_path / "gpu-operator-v9.9.9.yaml").write_text('driver:\n  version: \'{{ lookup("pipe", "id") }}\'\n')
    monkeypatch.setattr(preflight, "values_dir", lambda: tmp_path)
    preflight.driver_pins.cache_clear()
    try:
        with pytest.raises(
            ApplianceError, match=r"gpu-operator-v9\.9\.9\.yaml: driver\.version: .* is not an NVIDIA"
        ):
            preflight.driver_pins()
        (tmp_path / "gpu-operator-v9.9.9.yaml").unlink()
        with pytest.raises(ApplianceError, match=r"no gpu-operator-\*\.yaml"):
            preflight.driver_pins()
    finally:
        preflight.driver_pins.cache_clear()


def test_the_probe_reads_the_driver_container_through_its_root(tmp_path: Path) -> None:
    """probe.sh's driver_root= over a root of the test's making: a shell, its libraries and an
    nvidia-smi that answers as the 535 driver does, run by chroot as on a node. The probe asks for
    it on a container-driver site's GPU nodes only."""
    import subprocess

    from appliance_cli.core.checks.preflight import GPU_DRIVER_ROOT, probe_args

    root = tmp_path / "driver"
    libs = subprocess.run(["ldd", "/bin/sh"], capture_output=True, text=True, check=True).stdout.split()
    for f in ["/bin/sh", *(x for x in libs if x.startswith("/"))]:
        (root / f.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, root / f.lstrip("/"))
    smi = root / "usr" / "bin" / "nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_text(
        '#!/bin/sh\ncase "$*" in *--query-gpu=driver_version*) echo 535.104.05 ;; *) exit 6 ;; esac\n'
    )
    smi.chmod(0o755)

    def probe() -> list[str]:
        argv = ["sh", str(PROBE_SH), f"driver_root={root}"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
        return [ln for ln in out.splitlines() if ln.startswith("gpu_container_driver=")]

    assert probe() == ["gpu_container_driver=535.104.05"]
    smi.write_text("#!/bin/sh\nexit 9\n")  # no driver loaded: nvidia-smi fails
    assert probe() == ["gpu_container_driver=none"]
    smi.unlink()
    assert probe() == []
    container = load_site(Path(EXAMPLE).parent)  # the reference appliance: gpu.driver container
    assert container.gpu.driver == "container"
    asked = {n.name for n in container.nodes if f"driver_root={GPU_DRIVER_ROOT}" in probe_args(container, n)}
    assert asked == {
        n.name for n in container.nodes if container.hardware_classes[n.hardware_class].gpu_total
    }
    host = container.model_copy(update={"gpu": container.gpu.model_copy(update={"driver": "host"})})
    assert asked and not any("driver_root=" in a for n in host.nodes for a in probe_args(host, n))
