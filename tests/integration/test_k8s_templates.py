"""The Kubernetes-layer roles' templates and logic, rendered by Ansible itself.

Every template is rendered by a real `ansible-playbook` run against localhost (the role's
defaults loaded as vars files, the site-wide `appliance_*` variables as extra vars), then
parsed with the format's own parser (tomllib, json, yaml) and checked. Role task files
that hold logic (the docker refusal, the containerd carry-over, the node label plan) are
run for real too. Where a containerd binary is installed, the rendered config.toml is
also loaded by containerd (`containerd --config FILE config dump`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
BIN = Path(sys.executable).parent
PLAYBOOK = str(BIN / "ansible-playbook") if (BIN / "ansible-playbook").exists() else "ansible-playbook"
CONTAINERD = shutil.which("containerd")

REGISTRY = "master1:5000"
MASTER_IP = "10.77.0.11"
SITE = {
    "appliance_kubernetes_version": "v1.23.17",
    "appliance_pod_cidr": "10.244.0.0/16",
    "appliance_service_cidr": "10.96.0.0/12",
    "appliance_cluster_dns_domain": "cluster.local",
    "appliance_container_runtime": "containerd",
    "appliance_cri_socket": "unix:///run/containerd/containerd.sock",
    "appliance_token_ttl": "24h0m0s",
    "appliance_registry_address": REGISTRY,
    "appliance_master_address": MASTER_IP,
    "appliance_files_url": f"http://{MASTER_IP}:8081/files",
    "appliance_bundle_files": {},
    "appliance_node_roles": ["master", "runai-system"],
    "appliance_hardware_class": "S5SP",
    # no facts gathered here: the paths of a Debian/Ubuntu node, from the role's own table
    "__kube_binaries_os": "{{ __kube_binaries_os_table.Debian }}",
}
DEFAULTS = [
    "appliance_paths/defaults/main.yml",  # the paths contract: a meta dependency of these roles
    "container_runtime/defaults/main.yml",
    "kube_binaries/vars/main.yml",
    "kube_binaries/defaults/main.yml",
    "control_plane/defaults/main.yml",
    "cni_flannel/defaults/main.yml",
]
TEMPLATES = {
    "config.toml": "container_runtime/templates/etc/containerd/config.toml.j2",
    "hosts.toml": "container_runtime/templates/etc/containerd/certs.d/hosts.toml.j2",
    "daemon.json": "container_runtime/templates/etc/docker/daemon.json.j2",
    "crictl.yaml": "kube_binaries/templates/etc/crictl.yaml.j2",
    "kubelet.service": "kube_binaries/templates/etc/systemd/system/kubelet.service.j2",
    "10-kubeadm.conf": "kube_binaries/templates/etc/systemd/system/kubelet.service.d/10-kubeadm.conf.j2",
    "kubeadm-config.yaml": "control_plane/templates/etc/kubernetes/kubeadm-config.yaml.j2",
    "kube-flannel.yml": "cni_flannel/templates/etc/kubernetes/addons/kube-flannel.yml.j2",
}


# --------------------------------------------------------------------------- helpers


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_FILTER_PLUGINS=os.pathsep.join(
            str(ROLES / r / "filter_plugins") for r in ("container_runtime", "node_roles", "control_plane")
        ),
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="false",
    )
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_playbook(
    tmp: Path,
    plays: list[dict[str, Any]],
    extra: dict[str, Any],
    *,
    check: bool = True,
    dry_run: bool = False,
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook on localhost; `check`: fail the test on a failed run; `dry_run`: --check."""
    tmp.mkdir(parents=True, exist_ok=True)
    pb = tmp / "play.yml"
    pb.write_text(yaml.safe_dump(plays, sort_keys=False))
    ev = tmp / "extra.json"
    ev.write_text(json.dumps({"ansible_python_interpreter": sys.executable, **extra}))
    inv = tmp / "inventory.yml"
    if not inv.exists():
        inv.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}))
    proc = subprocess.run(
        [PLAYBOOK, "-i", str(inv), str(pb), "-e", f"@{ev}", *(["--check"] if dry_run else [])],
        cwd=tmp,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"ansible-playbook failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def recap_changed(proc: subprocess.CompletedProcess[str]) -> int:
    m = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", proc.stdout)
    assert m, proc.stdout
    return int(m.group(1))


def render(tmp: Path, overrides: dict[str, Any] | None = None) -> dict[str, str]:
    """Render every role template with Ansible's templating (one module call in all)."""
    out = tmp / "rendered.json"
    rendered = ", ".join(
        f"{name!r}: lookup('ansible.builtin.template', {str(ROLES / src)!r})"
        for name, src in TEMPLATES.items()
    )
    plays = [
        {
            "name": "Render",
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(ROLES / f) for f in DEFAULTS],
            "tasks": [
                {
                    "name": "Render | Every template",
                    "ansible.builtin.copy": {
                        "content": "{{ {" + rendered + "} | to_json }}",
                        "dest": str(out),
                        "mode": "0644",
                    },
                }
            ],
        }
    ]
    # the master's inventory address, as the rendered inventory sets it
    run_playbook(tmp, plays, {**SITE, "ansible_host": MASTER_IP, **(overrides or {})})
    return json.loads(out.read_text())


def yaml_docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs}


@pytest.fixture(scope="module")
def containerd(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return render(tmp_path_factory.mktemp("containerd"))


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return render(
        tmp_path_factory.mktemp("docker"),
        {
            "appliance_container_runtime": "docker",
            "appliance_cri_socket": "unix:///var/run/dockershim.sock",
            # a user trying to switch the cgroup driver back must not win
            "container_runtime_docker_daemon_options": {
                "exec-opts": ["native.cgroupdriver=cgroupfs"],
                "debug": True,
            },
        },
    )


@pytest.fixture(scope="module")
def oidc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return render(
        tmp_path_factory.mktemp("oidc"),
        {
            "appliance_node_roles": ["master"],
            # the site's scheduler.oidc as the CLI renders it (oidc_settings): the one source
            "appliance_scheduler_oidc": {
                "issuer_url": "https://runai.lab.internal/auth/realms/runai",
                "client_id": "runai",
                "username_claim": "",
                "username_prefix": "oidc:",
                "groups_claim": "groups",
                "groups_prefix": "oidc:",
                "ca_file": "/site/org-ca.pem",
            },
        },
    )


# --------------------------------------------------------------------------- containerd


def test_containerd_config_toml(containerd: dict[str, str]) -> None:
    cfg = tomllib.loads(containerd["config.toml"])
    assert cfg["version"] == 2
    cri = cfg["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == f"{REGISTRY}/pause:3.6"
    assert cri["registry"]["config_path"] == "/etc/containerd/certs.d"
    assert cri["cni"]["bin_dir"] == "/opt/cni/bin"
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["runc"]["runtime_type"] == "io.containerd.runc.v2"
    assert runtimes["runc"]["options"]["SystemdCgroup"] is True
    assert cri["containerd"]["default_runtime_name"] == "runc"
    assert set(runtimes) == {"runc"}


@pytest.mark.skipif(CONTAINERD is None, reason="containerd is not installed here")
def test_containerd_accepts_config_toml(containerd: dict[str, str], tmp_path: Path) -> None:
    f = tmp_path / "config.toml"
    f.write_text(containerd["config.toml"])
    dump = subprocess.run([CONTAINERD, "--config", str(f), "config", "dump"], capture_output=True, text=True)
    assert dump.returncode == 0, dump.stderr
    eff = tomllib.loads(dump.stdout)["plugins"]["io.containerd.grpc.v1.cri"]
    assert eff["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert eff["sandbox_image"] == f"{REGISTRY}/pause:3.6"


def test_hosts_toml(containerd: dict[str, str]) -> None:
    hosts = tomllib.loads(containerd["hosts.toml"])
    assert hosts["server"] == f"https://{REGISTRY}"
    entry = hosts["host"][f"https://{REGISTRY}"]
    assert entry["capabilities"] == ["pull", "resolve"]
    contract = yaml.safe_load((ROLES / "appliance_paths" / "defaults" / "main.yml").read_text())
    assert entry["ca"] == contract["appliance_paths_registry_ca"]


def test_crictl_endpoint_follows_runtime(containerd: dict[str, str], docker: dict[str, str]) -> None:
    assert (
        yaml.safe_load(containerd["crictl.yaml"])["runtime-endpoint"]
        == "unix:///run/containerd/containerd.sock"
    )
    assert yaml.safe_load(docker["crictl.yaml"])["runtime-endpoint"] == "unix:///var/run/dockershim.sock"


@pytest.mark.parametrize(
    ("runtime", "socket"),
    [("containerd", "unix:///run/containerd/containerd.sock"), ("docker", "unix:///var/run/dockershim.sock")],
)
def test_one_cri_socket_for_every_role(tmp_path: Path, runtime: str, socket: str) -> None:
    """The generated group_vars define the socket once; the roles' variables only point at it."""
    from appliance_cli.core.inventory import render_inventory
    from appliance_cli.core.siteconfig import load_site

    cfg = load_site(REPO / "inventories" / "example")
    cfg.kubernetes.container_runtime = runtime  # type: ignore[assignment]
    group_vars = yaml.safe_load(render_inventory(cfg, tmp_path).group_vars_file.read_text())
    assert group_vars["appliance_cri_socket"] == socket
    for role, name in [
        ("kube_binaries", "kube_binaries_cri_socket"),
        ("control_plane", "control_plane_cri_socket"),
        ("node_join", "node_join_cri_socket"),
    ]:
        defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())
        assert defaults[name] == "{{ appliance_cri_socket }}", role
    # containerd_socket (containerd's own listen path, container_runtime) is another setting
    defined = [
        p
        for p in ROLES.rglob("*.y*ml")
        if any("unix:///" in line for line in p.read_text().splitlines() if not line.lstrip().startswith("#"))
    ]
    assert defined == [], "a role spells a CRI socket path itself"


# --------------------------------------------------------------------------- docker


def test_docker_daemon_json(docker: dict[str, str]) -> None:
    daemon = json.loads(docker["daemon.json"])
    assert daemon["exec-opts"] == ["native.cgroupdriver=systemd"]
    assert daemon["debug"] is True


def _assert_play(
    tmp: Path, extra: dict[str, Any], role: str = "container_runtime"
) -> subprocess.CompletedProcess[str]:
    """The role's tasks/0010-assert.yml with its defaults and the site's variables (+ extra)."""
    plays = [
        {
            "name": "Assert",
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(ROLES / role / "defaults/main.yml")],
            "tasks": [
                {
                    "name": "Assert | Role checks",
                    "ansible.builtin.include_tasks": str(ROLES / role / "tasks/0010-assert.yml"),
                }
            ],
        }
    ]
    return run_playbook(tmp, plays, {**SITE, **extra}, check=False)


@pytest.mark.parametrize(
    ("runtime", "version", "ok"),
    [
        ("docker", "v1.23.17", True),
        ("docker", "v1.24.0", False),
        ("docker", "1.28.3", False),
        ("containerd", "v1.24.0", True),
    ],
)
def test_docker_refused_from_1_24(tmp_path: Path, runtime: str, version: str, ok: bool) -> None:
    proc = _assert_play(
        tmp_path, {"appliance_container_runtime": runtime, "appliance_kubernetes_version": version}
    )
    assert (proc.returncode == 0) is ok, proc.stdout
    if not ok:
        assert "dockershim was removed in 1.24: migrate to containerd first" in proc.stdout


SHA = "0" * 64


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({n: {"sha256": SHA} for n in ("kubeadm", "kubelet", "kubectl", "crictl", "cni-plugins")}, None),
        (
            {"kubeadm": {"sha256": SHA}, "kubelet": {"sha256": "abc"}, "crictl": {"sha256": SHA}},
            "bundle file artifact(s) kubelet, kubectl, cni-plugins missing from appliance_bundle_files"
            " (or without a sha256)",
        ),
        (
            {n: {"sha256": SHA} for n in ("kubeadm", "kubelet", "kubectl", "crictl")},
            "bundle file artifact(s) cni-plugins missing",
        ),
    ],
)
def test_kube_binaries_names_every_missing_artifact_at_once(
    tmp_path: Path, files: dict[str, Any], message: str | None
) -> None:
    extra = {"appliance_bundle_files": files}
    proc = _assert_play(tmp_path, extra, role="kube_binaries")
    assert (proc.returncode == 0) is (message is None), proc.stdout
    if message:
        assert message in proc.stdout


def _record_versions(
    tmp: Path, record: dict[str, str] | None, downloaded: bool, kubectl: dict[str, str] | None = None
) -> tuple[str, int]:
    """kube_binaries' 0050-facts.yml with fake binaries on PATH: (the fact file, how often they ran).
    `kubectl`: the bundle's kubectl artifact (version, kubernetes) and the fake's answer follows it."""
    bindir, calls = tmp / "bin", tmp / "calls"
    bindir.mkdir(parents=True)
    outputs = {
        "kubeadm": "v1.23.17",
        "kubelet": "Kubernetes v1.23.17",
        "kubectl": json.dumps({"clientVersion": {"gitVersion": (kubectl or {}).get("version", "v1.23.17")}}),
        "crictl": "crictl version v1.23.0",
    }
    for name, out in outputs.items():
        script = bindir / name
        script.write_text(f"#!/bin/sh\necho {name} >> {calls}\ncat <<'EOF'\n{out}\nEOF\n")
        script.chmod(0o755)
    fact = tmp / "facts.d" / "appliance_kube.fact"
    if record is not None:
        fact.parent.mkdir()
        fact.write_text(json.dumps(record))
    play = {
        "name": "Facts",
        "hosts": "localhost",
        "gather_facts": False,
        "environment": {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"},
        "vars_files": [str(ROLES / "kube_binaries/defaults/main.yml")],
        "tasks": [
            {
                "name": "Facts | A download of this run",
                "ansible.builtin.set_fact": {"kube_binaries_download": {"changed": downloaded}},
            },
            {  # through the role: its library/ holds the module the task file runs
                "name": "Facts | Role task file",
                "ansible.builtin.include_role": {"name": "kube_binaries", "tasks_from": "0050-facts.yml"},
            },
        ],
    }
    files: dict[str, Any] = {"cni-plugins": {"sha256": SHA, "version": "v1.1.1"}}
    if kubectl:
        files["kubectl"] = {"sha256": SHA, **kubectl}
    extra = {**SITE, "appliance_bundle_files": files, "kube_binaries_fact_file": str(fact)}
    proc = run_playbook(tmp, [play], extra, check=False)
    if proc.returncode != 0:
        return proc.stdout, -1
    ran = len(calls.read_text().split()) if calls.exists() else 0
    return (fact.read_text() if fact.exists() else ""), ran


RECORD = {
    "kubeadm": "v1.23.17",
    "kubelet": "v1.23.17",
    "kubectl": "v1.23.17",
    "crictl": "v1.23.0",
    "cni_plugins": "v1.1.1",
    "kubernetes": "v1.23.17",
    "installed_at": "2026-01-01T00:00:00Z",
}


def test_kube_binaries_asks_the_binaries_only_when_needed(tmp_path: Path) -> None:
    # first run: no record, the binaries are asked and their versions recorded
    text, ran = _record_versions(tmp_path / "first", None, downloaded=True)
    assert ran == 4
    assert {k: v for k, v in json.loads(text).items() if k != "installed_at"} == {
        k: v for k, v in RECORD.items() if k != "installed_at"
    }
    # nothing downloaded and the record agrees: nothing asked, the record (and its time) kept
    text, ran = _record_versions(tmp_path / "same", RECORD, downloaded=False)
    assert (ran, json.loads(text)) == (0, RECORD)
    # a binary downloaded again: asked; same versions, so installed_at does not move
    text, ran = _record_versions(tmp_path / "again", RECORD, downloaded=True)
    assert (ran, json.loads(text)) == (4, RECORD)
    # the record names another CNI release: asked, and the new record gets a new time
    text, ran = _record_versions(tmp_path / "cni", {**RECORD, "cni_plugins": "v0.9"}, downloaded=False)
    assert ran == 4 and json.loads(text)["cni_plugins"] == "v1.1.1"
    assert json.loads(text)["installed_at"] != RECORD["installed_at"]


# --------------------------------------------------------------------------- kubelet


def test_kubelet_unit_and_dropin(containerd: dict[str, str]) -> None:
    unit = containerd["kubelet.service"]
    assert "ExecStart=/usr/bin/kubelet\n" in unit
    assert "Restart=always" in unit and "WantedBy=multi-user.target" in unit
    dropin = containerd["10-kubeadm.conf"]
    assert "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf" in dropin
    assert "--config=/var/lib/kubelet/config.yaml" in dropin
    assert "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env" in dropin
    assert "EnvironmentFile=-/etc/default/kubelet" in dropin
    execs = [line for line in dropin.splitlines() if line.startswith("ExecStart=")]
    assert execs == [
        "ExecStart=",
        "ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS "
        "$KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS",
    ]


# --------------------------------------------------------------------------- kubeadm


def test_kubeadm_config(containerd: dict[str, str]) -> None:
    docs = yaml_docs(containerd["kubeadm-config.yaml"])
    assert [(d["apiVersion"], d["kind"]) for d in docs] == [
        ("kubeadm.k8s.io/v1beta3", "InitConfiguration"),
        ("kubeadm.k8s.io/v1beta3", "ClusterConfiguration"),
        ("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration"),
    ]
    k = by_kind(docs)
    init, cluster, kubelet = k["InitConfiguration"], k["ClusterConfiguration"], k["KubeletConfiguration"]
    assert init["localAPIEndpoint"] == {"advertiseAddress": MASTER_IP, "bindPort": 6443}
    assert init["nodeRegistration"]["criSocket"] == "unix:///run/containerd/containerd.sock"
    assert init["nodeRegistration"]["name"] == "localhost"
    # the master is also a Run:ai system node and keeps its taint: Run:ai's system services
    # tolerate it, nothing else lands there (SEED-COVERAGE K13)
    assert init["nodeRegistration"]["taints"] == [
        {"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"}
    ]
    assert init["bootstrapTokens"][0]["ttl"] == "24h0m0s"
    assert cluster["kubernetesVersion"] == "v1.23.17"
    assert cluster["imageRepository"] == REGISTRY
    assert cluster["controlPlaneEndpoint"] == f"{MASTER_IP}:6443"
    assert cluster["networking"] == {
        "dnsDomain": "cluster.local",
        "podSubnet": "10.244.0.0/16",
        "serviceSubnet": "10.96.0.0/12",
    }
    assert "extraArgs" not in cluster["apiServer"]
    assert not any("oidc" in line for line in containerd["kubeadm-config.yaml"].splitlines())
    assert kubelet["cgroupDriver"] == "systemd"


def test_kubeadm_config_docker_socket(docker: dict[str, str]) -> None:
    init = by_kind(yaml_docs(docker["kubeadm-config.yaml"]))["InitConfiguration"]
    assert init["nodeRegistration"]["criSocket"] == "unix:///var/run/dockershim.sock"


def test_kubeadm_config_oidc(oidc: dict[str, str]) -> None:
    k = by_kind(yaml_docs(oidc["kubeadm-config.yaml"]))
    assert k["ClusterConfiguration"]["apiServer"]["extraArgs"] == {
        "oidc-issuer-url": "https://runai.lab.internal/auth/realms/runai",
        "oidc-client-id": "runai",
        "oidc-username-prefix": "oidc:",
        "oidc-groups-claim": "groups",
        "oidc-groups-prefix": "oidc:",
        "oidc-ca-file": "/etc/kubernetes/pki/oidc-ca.crt",  # the copy on the master
    }
    # any master keeps kubeadm's default taint
    assert k["InitConfiguration"]["nodeRegistration"]["taints"] == [
        {"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"}
    ]


# --------------------------------------------------------------------------- flannel


def test_flannel_manifest(containerd: dict[str, str]) -> None:
    docs = yaml_docs(containerd["kube-flannel.yml"])
    for d in docs:
        assert d["apiVersion"] and d["kind"] and d["metadata"]["name"], d
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert kinds == {
        ("Namespace", "kube-flannel"),
        ("ClusterRole", "flannel"),
        ("ClusterRoleBinding", "flannel"),
        ("ServiceAccount", "flannel"),
        ("ConfigMap", "kube-flannel-cfg"),
        ("DaemonSet", "kube-flannel-ds"),
    }
    k = by_kind(docs)
    net = json.loads(k["ConfigMap"]["data"]["net-conf.json"])
    assert net == {"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}
    cni = json.loads(k["ConfigMap"]["data"]["cni-conf.json"])
    assert [p["type"] for p in cni["plugins"]] == ["flannel", "portmap"]
    pod = k["DaemonSet"]["spec"]["template"]["spec"]
    images = {c["name"]: c["image"] for c in pod["initContainers"] + pod["containers"]}
    assert images == {
        "install-cni-plugin": f"{REGISTRY}/flannel/flannel-cni-plugin:v1.2.0",
        "install-cni": f"{REGISTRY}/flannel/flannel:v0.22.3",
        "kube-flannel": f"{REGISTRY}/flannel/flannel:v0.22.3",
    }
    assert pod["containers"][0]["args"] == ["--ip-masq", "--kube-subnet-mgr"]


def _openapi_errors(docs: list[dict[str, Any]]) -> list[str]:
    import kubernetes_validate

    errors = []
    for d in docs:
        try:
            kubernetes_validate.validate(d, "1.23", strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{d['kind']}/{d['metadata']['name']}: {e.message} at {'.'.join(map(str, e.path))}")
    return errors


def test_flannel_manifest_is_valid_for_kubernetes_1_23(containerd: dict[str, str]) -> None:
    """Against the 1.23 OpenAPI schemas, strict: what the API server (and kubectl's client-side
    validation) would refuse. The stand-in API does not check fields; this does."""
    docs = yaml_docs(containerd["kube-flannel.yml"])
    assert _openapi_errors(docs) == []
    # and the check can fail: a mistyped field, a wrong type
    typo = json.loads(json.dumps(docs))
    by_kind(typo)["DaemonSet"]["spec"]["template"]["spec"]["tolerationz"] = []
    assert _openapi_errors(typo) == [
        "DaemonSet/kube-flannel-ds: Additional properties are not allowed ('tolerationz' was unexpected) "
        "at spec.template.spec"
    ]
    wrong_type = json.loads(json.dumps(docs))
    by_kind(wrong_type)["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": "1"
    }
    (error,) = _openapi_errors(wrong_type)
    assert error.startswith("DaemonSet/kube-flannel-ds: '1' is not of type 'object'"), error


# --------------------------------------------------------------------------- GPU Operator edits survive

# What the NVIDIA GPU Operator toolkit (container-toolkit 1.16, containerd config v2) leaves
# in config.toml: the whole file re-serialised, plus its runtimes and the default.
OPERATOR_TABLES = """
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  privileged_without_host_devices = false
  runtime_engine = ""
  runtime_root = ""
  runtime_type = "io.containerd.runc.v2"

  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-cdi]
  runtime_type = "io.containerd.runc.v2"

  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-cdi.options]
    BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime.cdi"
"""


def operator_edit(path: Path) -> None:
    """Simulate the toolkit: load, add runtimes + default, write back (re-serialised)."""
    text = path.read_text()
    text = text.replace('default_runtime_name = "runc"', 'default_runtime_name = "nvidia"')
    # the toolkit also drifts a value we own; the role must put it back
    text = text.replace("SystemdCgroup = true", "SystemdCgroup = false", 1)
    path.write_text(text + OPERATOR_TABLES)


def _config_play(tmp: Path, cfg: Path) -> subprocess.CompletedProcess[str]:
    """Run the role's own config task file (a copy of the role whose restart handler
    is replaced by a no-op: nothing to restart on this machine)."""
    role = tmp / "roles" / "container_runtime"
    if not role.exists():
        shutil.copytree(ROLES / "container_runtime", role)
        (role / "handlers" / "main.yml").write_text(
            "---\n- name: Container runtime | Restart containerd\n"
            "  ansible.builtin.debug:\n    msg: restart\n"
        )
    plays = [
        {
            "name": "Containerd config",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Containerd config | Role task file",
                    "ansible.builtin.include_role": {
                        "name": str(role),
                        "tasks_from": "0030-containerd-config.yml",
                    },
                }
            ],
        }
    ]
    extra = {
        **SITE,
        "container_runtime_containerd_config_file": str(cfg),
        "container_runtime_containerd_certs_dir": str(tmp / "certs.d"),
        "container_runtime_containerd_validate": CONTAINERD is not None,
    }
    return run_playbook(tmp, plays, extra)


def test_operator_runtimes_survive_reapply(tmp_path: Path) -> None:
    cfg = tmp_path / "etc" / "config.toml"
    first = _config_play(tmp_path, cfg)
    assert recap_changed(first) > 0
    assert recap_changed(_config_play(tmp_path, cfg)) == 0, "second run must change nothing"

    operator_edit(cfg)
    edited = tomllib.loads(cfg.read_text())  # the simulated edit is valid TOML
    assert "nvidia" in edited["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]

    reapply = _config_play(tmp_path, cfg)
    assert recap_changed(reapply) == 1, "the drifted SystemdCgroup is put back"
    after = tomllib.loads(cfg.read_text())
    ctd = after["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert ctd["default_runtime_name"] == "nvidia"
    assert (
        ctd["runtimes"]["nvidia"]["options"]["BinaryName"]
        == "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    )
    assert ctd["runtimes"]["nvidia"]["options"]["SystemdCgroup"] is True
    assert ctd["runtimes"]["nvidia"]["privileged_without_host_devices"] is False
    assert ctd["runtimes"]["nvidia-cdi"]["runtime_type"] == "io.containerd.runc.v2"
    assert ctd["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert after["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] == f"{REGISTRY}/pause:3.6"
    assert recap_changed(_config_play(tmp_path, cfg)) == 0, "stable once the operator's tables are carried"

    if CONTAINERD:
        dump = subprocess.run(
            [CONTAINERD, "--config", str(cfg), "config", "dump"], capture_output=True, text=True
        )
        assert dump.returncode == 0, dump.stderr
        eff = tomllib.loads(dump.stdout)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
        assert eff["default_runtime_name"] == "nvidia"
        assert "nvidia" in eff["runtimes"]

    hosts = tomllib.loads((tmp_path / "certs.d" / REGISTRY / "hosts.toml").read_text())
    assert hosts["server"] == f"https://{REGISTRY}"


def test_carry_over_filter_round_trips_arbitrary_tables() -> None:
    sys.path.insert(0, str(ROLES / "container_runtime" / "filter_plugins"))
    try:
        import containerd_config as f
    finally:
        sys.path.pop(0)
    source = """
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "kata"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
      runtime_type = "io.containerd.kata.v2"
      pod_annotations = ["io.katacontainers.*"]
      options = { ConfigPath = "/etc/kata \\"x\\".toml", "odd.key" = 1.5 }
"""
    carried = f.containerd_carry_over(source, ["runc"], ["enable_cdi", "cdi_spec_dirs"])
    assert set(carried["runtimes"]) == {"kata"}
    assert carried["default_runtime_name"] == "kata"
    assert carried["cri"] == {"enable_cdi": True, "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"]}
    text = f.containerd_toml_table(
        carried["runtimes"]["kata"],
        ["plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "kata"],
    )
    back = tomllib.loads(text)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["kata"]
    assert back == carried["runtimes"]["kata"]
    assert f.containerd_carry_over("", ["runc"], [])["runtimes"] == {}
    with pytest.raises(Exception, match="not valid TOML"):
        f.containerd_carry_over("version = = 2", ["runc"], [])


@pytest.mark.skipif(CONTAINERD is None, reason="containerd is not installed here")
def test_why_not_a_dropin(tmp_path: Path) -> None:
    """Design record: on containerd 1.x an imported drop-in that sets any CRI option
    replaces the whole CRI plugin table of config.toml, so the operator's runtime in
    config.toml would vanish. Hence the role re-templates config.toml and carries
    foreign runtimes over instead of using `imports`."""
    dropin_dir = tmp_path / "conf.d"
    dropin_dir.mkdir()
    (dropin_dir / "10-appliance.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "x/pause:3.6"\n'
    )
    main = tmp_path / "config.toml"
    main.write_text(f'version = 2\nimports = ["{dropin_dir}/*.toml"]\n' + OPERATOR_TABLES)
    dump = subprocess.run(
        [CONTAINERD, "--config", str(main), "config", "dump"], capture_output=True, text=True
    )
    assert dump.returncode == 0, dump.stderr
    version = subprocess.run([CONTAINERD, "--version"], capture_output=True, text=True).stdout
    runtimes = tomllib.loads(dump.stdout)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    if re.search(r"\s1\.\d+\.", version):
        assert "nvidia" not in runtimes


# --------------------------------------------------------------------------- node labels


def _node(name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None) -> str:
    return json.dumps({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints or []}})


def _plan(tmp: Path, current: list[dict[str, Any]], extra: dict[str, Any]) -> list[dict[str, str]]:
    tmp.mkdir(parents=True, exist_ok=True)
    inv = tmp / "inventory.yml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {"ansible_connection": "local"},
                        "master1": {
                            "appliance_node_roles": ["master", "runai-system"],
                            "appliance_hardware_class": "S5SP",
                        },
                        "worker1": {
                            "appliance_node_roles": ["gpu-worker"],
                            "appliance_hardware_class": "S5N-3U",
                        },
                        "worker3": {
                            "appliance_node_roles": ["cpu-worker"],
                            "appliance_hardware_class": "CPU",
                            "node_roles_disable_gpu_operands": True,
                        },
                    }
                }
            }
        )
    )
    # what `kubectl get nodes -o json` prints: one NodeList holding every node
    node_list = {
        "stdout": json.dumps({"kind": "NodeList", "items": [json.loads(c["stdout"]) for c in current]})
    }
    plays = [
        {
            "name": "Plan",
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(ROLES / "node_roles/defaults/main.yml")],
            "vars": {"appliance_gpu_mig_profiles": {}},  # the site's gpu.mig.profiles (none here)
            "tasks": [
                {
                    "name": "Plan | Fake kubectl get node",
                    "ansible.builtin.set_fact": {"node_roles_current": node_list},
                },
                {
                    "name": "Plan | Role task file",
                    "ansible.builtin.include_tasks": str(ROLES / "node_roles/tasks/0010-plan.yml"),
                },
                {
                    "name": "Plan | Save",
                    "ansible.builtin.copy": {
                        "content": "{{ node_roles_plan | to_json }}",
                        "dest": str(tmp / "plan.json"),
                        "mode": "0644",
                    },
                },
                {
                    "name": "Plan | Save the kubectl calls",
                    "ansible.builtin.copy": {
                        "content": "{{ node_roles_calls | to_json }}",
                        "dest": str(tmp / "calls.json"),
                        "mode": "0644",
                    },
                },
            ],
        }
    ]
    # the site's nodes (groups['appliance'] in a real inventory); nodes outside it are left alone
    run_playbook(tmp, plays, {"node_roles_nodes": [c["item"] for c in current]} | extra)
    return json.loads((tmp / "plan.json").read_text())


def test_node_roles_plan_only_what_differs(tmp_path: Path) -> None:
    current = [
        {
            "item": "master1",
            "stdout": _node(
                "master1", {"node-role.kubernetes.io/runai-system": "true", "run.ai/type": "S5SP"}
            ),
        },
        {
            "item": "worker1",
            "stdout": _node("worker1", {"node-role.kubernetes.io/cpu-worker": "true", "run.ai/type": "old"}),
        },
        {
            "item": "worker3",
            "stdout": _node("worker3", {}, [{"key": "runai", "value": "drain", "effect": "NoExecute"}]),
        },
    ]
    extra = {
        "node_roles_taints": [
            {"node": "worker1", "key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
        ],
        "node_roles_taints_absent": [{"node": "worker3", "key": "runai"}],
    }
    plan = _plan(tmp_path, current, extra)
    got = {(p["node"], p["verb"], p["arg"]) for p in plan}
    assert got == {
        ("worker1", "label", "node-role.kubernetes.io/runai-gpu-worker=true"),
        ("worker1", "label", "run.ai/type=S5N-3U"),
        ("worker1", "label", "node-role.kubernetes.io/cpu-worker-"),
        ("worker1", "taint", "dedicated=gpu:NoSchedule"),
        ("worker3", "label", "node-role.kubernetes.io/runai-cpu-worker=true"),
        ("worker3", "label", "run.ai/type=CPU"),
        ("worker3", "label", "nvidia.com/gpu.deploy.operands=false"),
        ("worker3", "taint", "runai-"),
        # the master's taint comes back even on a Run:ai system node (K13)
        ("master1", "taint", "node-role.kubernetes.io/master:NoSchedule"),
    }
    # one kubectl call per node and verb, holding all of that node's changes
    calls = json.loads((tmp_path / "calls.json").read_text())
    assert sorted((c["verb"], c["node"], sorted(c["args"])) for c in calls) == [
        (
            "label",
            "worker1",
            sorted(
                [
                    "node-role.kubernetes.io/runai-gpu-worker=true",
                    "run.ai/type=S5N-3U",
                    "node-role.kubernetes.io/cpu-worker-",
                ]
            ),
        ),
        (
            "label",
            "worker3",
            sorted(
                [
                    "node-role.kubernetes.io/runai-cpu-worker=true",
                    "run.ai/type=CPU",
                    "nvidia.com/gpu.deploy.operands=false",
                ]
            ),
        ),
        ("taint", "master1", ["node-role.kubernetes.io/master:NoSchedule"]),
        ("taint", "worker1", ["dedicated=gpu:NoSchedule"]),
        ("taint", "worker3", ["runai-"]),
    ]


def test_node_roles_plan_empty_when_converged(tmp_path: Path) -> None:
    current = [
        {
            "item": "worker1",
            "stdout": _node(
                "worker1",
                {
                    "node-role.kubernetes.io/runai-gpu-worker": "true",
                    "run.ai/type": "S5N-3U",
                    "kubernetes.io/os": "linux",
                },
                [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
            ),
        },
    ]
    extra = {
        "node_roles_taints": [{"node": "worker1", "key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    }
    assert _plan(tmp_path, current, extra) == []
    assert json.loads((tmp_path / "calls.json").read_text()) == []


# --------------------------------------------------------------------------- node_join

JOIN_TOKEN = "abcdef.0123456789abcdef"
JOIN_HASH = "sha256:" + "ab" * 32
FAKE_KUBEADM = """#!/bin/sh
# records what `kubeadm join` was given, as the node's process list would show it
cfg="$3"
{ echo "argv: $*"; echo "mode: $(stat -c %a "$cfg")"; cat "$cfg"; } > "$RECORD"
[ "$JOIN_FAILS" = 1 ] && { echo "error execution phase preflight: token $(grep token: "$cfg")" >&2; exit 1; }
touch "$KUBELET_CONF"
"""


def _join(tmp: Path, fails: bool) -> tuple[subprocess.CompletedProcess[str], str, Path]:
    """node_join's join.yml run for real on localhost, with a kubeadm that records its input."""
    bindir = tmp / "bin"
    bindir.mkdir(parents=True)
    (bindir / "kubeadm").write_text(FAKE_KUBEADM)
    (bindir / "kubeadm").chmod(0o755)
    record, conf, cfg_file = tmp / "record.txt", tmp / "kubelet.conf", tmp / "join.yaml"
    plays = [
        {
            "name": "Join",
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(ROLES / "node_join" / "defaults" / "main.yml")],
            "environment": {
                "PATH": f"{bindir}:{os.environ['PATH']}",
                "RECORD": str(record),
                "KUBELET_CONF": str(conf),
                "JOIN_FAILS": "1" if fails else "0",
            },
            "tasks": [
                {
                    "name": "Join | The role's join tasks",
                    "ansible.builtin.include_tasks": str(ROLES / "node_join" / "tasks" / "join.yml"),
                }
            ],
        }
    ]
    stdout = (
        f"kubeadm join {MASTER_IP}:6443 --token {JOIN_TOKEN} --discovery-token-ca-cert-hash {JOIN_HASH} \n"
    )
    extra = {
        **SITE,
        "node_join_command": {"stdout": stdout},
        "node_join_config_file": str(cfg_file),
        "node_join_kubelet_kubeconfig": str(conf),
        "node_join_master": "master1",
    }
    pb_dir = tmp / "play"
    pb_dir.mkdir()
    (pb_dir / "templates").symlink_to(ROLES / "node_join" / "templates")  # the role's template path
    proc = run_playbook(pb_dir, plays, extra, check=False)
    return proc, record.read_text() if record.exists() else "", cfg_file


def test_node_join_passes_the_token_in_a_0600_file_never_on_the_command_line(tmp_path: Path) -> None:
    proc, record, cfg_file = _join(tmp_path, fails=False)
    assert proc.returncode == 0, proc.stdout
    argv = record.splitlines()[0]
    assert argv == f"argv: join --config {cfg_file}"  # nothing secret in the process list
    assert record.splitlines()[1] == "mode: 600"
    jc = yaml.safe_load("\n".join(record.splitlines()[2:]))
    assert jc["kind"] == "JoinConfiguration" and jc["apiVersion"] == "kubeadm.k8s.io/v1beta3"
    assert jc["discovery"]["bootstrapToken"] == {
        "apiServerEndpoint": f"{MASTER_IP}:6443",
        "token": JOIN_TOKEN,
        "caCertHashes": [JOIN_HASH],
    }
    assert jc["nodeRegistration"] == {"name": "localhost", "criSocket": SITE["appliance_cri_socket"]}
    assert not cfg_file.exists(), "the JoinConfiguration must be deleted after the join"
    assert JOIN_TOKEN not in proc.stdout + proc.stderr


def test_a_failed_join_masks_the_token_and_still_deletes_the_file(tmp_path: Path) -> None:
    proc, record, cfg_file = _join(tmp_path, fails=True)
    assert record.splitlines()[1] == "mode: 600"  # kubeadm ran, on the file
    assert proc.returncode != 0
    assert "kubeadm join failed on localhost (rc=1)" in proc.stdout
    assert "<token>" in proc.stdout and JOIN_TOKEN not in proc.stdout + proc.stderr
    assert not cfg_file.exists()


def test_kube_binaries_checks_each_tool_against_the_bundle(tmp_path: Path) -> None:
    """A test bundle's kubectl of another version (the lab's Debian v1.20 client) passes when the
    manifest declares that version bundled for the wanted release; not otherwise."""
    tmp = tmp_path
    lab = {"version": "v1.20.2", "kubernetes": "v1.23.17"}
    text, ran = _record_versions(tmp / "lab", None, downloaded=True, kubectl=lab)
    assert ran == 4 and json.loads(text)["kubectl"] == "v1.20.2"
    text, _ = _record_versions(tmp / "same", {**RECORD, "kubectl": "v1.20.2"}, downloaded=False, kubectl=lab)
    assert json.loads(text)["installed_at"] == RECORD["installed_at"]  # nothing asked again
    # a v1.20 kubectl the manifest does not declare bundled for 1.23: refused, saying so
    text, ran = _record_versions(tmp / "undeclared", None, downloaded=True, kubectl={"version": "v1.20.2"})
    assert ran == -1
    assert (
        "kubectl is v1.20.2, the bundle declares v1.20.2 for Kubernetes v1.20.2, expected Kubernetes v1.23.17"
        in text
    )


def _researcher_kubectl_check(
    tmp: Path, reported: str, artifact: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """researcher_cli's kubectl check (the task itself, from the role) on what kubectl reported."""
    tasks = yaml.safe_load((ROLES / "researcher_cli/tasks/main.yml").read_text())
    check = next(t for t in tasks if t["name"].startswith("Researcher CLI | kubectl is the bundle's"))
    version = {"stdout": json.dumps({"clientVersion": {"gitVersion": reported}})}
    play = {"name": "Check", "hosts": "localhost", "gather_facts": False,
            "tasks": [{"name": "Check | kubectl answered", "ansible.builtin.set_fact": {
                "researcher_cli_kubectl_version": version}}, check]}  # fmt: skip
    extra = {"researcher_cli_install_dir": "/usr/local/bin", "researcher_cli_kubectl_artifact": "kubectl",
             "researcher_cli_kubernetes_version": "v1.23.17", "researcher_cli_bundle_files": {"kubectl": artifact}}  # fmt: skip
    return run_playbook(tmp, [play], extra, check=False)


def test_researcher_kubectl_is_the_bundles_for_the_clusters_release(tmp_path: Path) -> None:
    lab = {"version": "v1.20.2", "kubernetes": "v1.23.17"}
    assert _researcher_kubectl_check(tmp_path / "lab", "v1.20.2", lab).returncode == 0
    assert (
        _researcher_kubectl_check(
            tmp_path / "prod", "v1.23.17", {"version": "v1.23.17", "kubernetes": ""}
        ).returncode
        == 0
    )
    bad = _researcher_kubectl_check(
        tmp_path / "undeclared", "v1.20.2", {"version": "v1.20.2", "kubernetes": ""}
    )
    assert (
        bad.returncode != 0 and "/usr/local/bin/kubectl is not v1.20.2 for Kubernetes v1.23.17" in bad.stdout
    )
    wrong = _researcher_kubectl_check(
        tmp_path / "wrong", "v1.23.16", {"version": "v1.23.17", "kubernetes": ""}
    )
    assert wrong.returncode != 0 and "is not v1.23.17 for Kubernetes v1.23.17" in wrong.stdout
