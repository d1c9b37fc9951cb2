"""Site config validation: the example passes; each malformed case is one line naming the field, exit 2."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from appliance_cli.cli.main import main
from appliance_cli.core.siteconfig import load_site, parse_site
from appliance_cli.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "example" / "appliance.yml"


@pytest.fixture
def example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def problems_of(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_site(data)
    return exc.value.problems


def test_example_and_lab_sites_are_valid():
    cfg = load_site(EXAMPLE)
    assert cfg.master.name == "master1"
    assert [n.hardware_class for n in cfg.nodes] == ["S5SP", "S5N-3U", "GZ2"]
    lab = load_site(REPO / "inventories" / "lab")
    assert len(lab.nodes) == 4 and lab.kubernetes.pod_cidr == "10.244.0.0/16"


def _mutate(data: dict, fn) -> dict:
    d = copy.deepcopy(data)
    fn(d)
    return d


CASES = {
    "no master": (
        lambda d: d["nodes"][0].update(roles=["runai-system"]),
        "nodes: no node has the 'master' role",
    ),
    "several masters": (
        lambda d: d["nodes"][1].update(roles=["master", "gpu-worker"]),
        "nodes[1].roles: several masters (master1, gpu1)",
    ),
    "duplicate hostname": (
        lambda d: d["nodes"][2].update(name="gpu1"),
        "nodes[2].name: duplicate hostname 'gpu1' (also nodes[1])",
    ),
    "duplicate address": (
        lambda d: d["nodes"][2].update(address="192.168.10.21"),
        "nodes[2].address: duplicate address 192.168.10.21 (also nodes[1])",
    ),
    "invalid hostname": (
        lambda d: d["nodes"][1].update(name="GPU_1"),
        "nodes[1].name: 'GPU_1' is not a valid RFC 1123 hostname",
    ),
    "pod cidr overlaps nodes": (
        lambda d: d["kubernetes"].update(pod_cidr="192.168.0.0/16"),
        "kubernetes.pod_cidr: 192.168.0.0/16 overlaps the node network 192.168.10.0/24",
    ),
    "service cidr overlaps nodes": (
        lambda d: d["kubernetes"].update(service_cidr="192.168.10.0/28"),
        "kubernetes.service_cidr: 192.168.10.0/28 overlaps the node network",
    ),
    "pod and service cidrs overlap each other": (
        lambda d: d["kubernetes"].update(pod_cidr="10.96.0.0/16", service_cidr="10.96.0.0/12"),
        "kubernetes.service_cidr: 10.96.0.0/12 overlaps the pod network 10.96.0.0/16",
    ),
    "unknown hardware class": (
        lambda d: d["nodes"][1].update(hardware_class="DGX"),
        "nodes[1].hardware_class: unknown hardware class 'DGX'",
    ),
    "unknown role": (
        lambda d: d["nodes"][1].update(roles=["gpu-worker", "storage"]),
        "nodes[1].roles[1]: unknown role 'storage'",
    ),
    "gpus but no gpu-worker role": (
        lambda d: d["nodes"][2].update(roles=["cpu-worker"]),
        "nodes[2].roles: hardware class GZ2 has 8 GPU(s) but the node has no 'gpu-worker' role",
    ),
    "runai without nfs": (
        lambda d: d.pop("nfs"),
        "nfs: required when scheduler.stack is 'runai'",
    ),
    "runai without domain": (
        lambda d: d["site"].pop("domain"),
        "site.domain: required when scheduler.stack is 'runai'",
    ),
    "misspelled field": (
        lambda d: d["kubernetes"].update(pod_cird="10.244.0.0/16"),
        "kubernetes.pod_cird: unknown field (check spelling)",
    ),
    "missing section": (
        lambda d: d.pop("registry"),
        "registry: required field is missing",
    ),
    "bad cidr": (
        lambda d: d["network"].update(node_cidr="192.168.10.1/24"),
        "network.node_cidr: '192.168.10.1/24' is not a valid CIDR",
    ),
    "misspelled role variable": (
        lambda d: d.update(role_vars={"cni_flannel_iface_name": "ens1f0"}),
        "role_vars.cni_flannel_iface_name: not a variable of any role",
    ),
    # what kubeadm 1.23 refuses at `init`, or a site meets on its second node
    "service cidr too large for the apiserver": (
        lambda d: d["kubernetes"].update(service_cidr="10.0.0.0/8"),
        "kubernetes.service_cidr: 10.0.0.0/8 is too large for Kubernetes: the mask must be >= 12",
    ),
    "pod cidr smaller than a node range": (
        lambda d: d["kubernetes"].update(pod_cidr="10.244.0.0/25"),
        "kubernetes.pod_cidr: 10.244.0.0/25 is smaller than one node's pod range (/24)",
    ),
    "pod cidr with fewer node ranges than nodes": (
        lambda d: d["kubernetes"].update(pod_cidr="10.244.0.0/23"),
        "kubernetes.pod_cidr: 10.244.0.0/23 holds 2 node range(s) of /24, the site has 3 nodes",
    ),
    "pod cidr too large for the node mask": (
        lambda d: d["kubernetes"].update(pod_cidr="10.0.0.0/7"),
        "kubernetes.pod_cidr: 10.0.0.0/7 is too large: the mask must be >= /8",
    ),
    "docker with gpu workers": (
        lambda d: d["kubernetes"].update(container_runtime="docker"),
        "kubernetes.container_runtime: docker with GPU workers (gpu1, gpu2): the docker path rewrites daemon.json",
    ),
    "kai on 1.23": (
        lambda d: d["scheduler"].update(stack="kai"),
        "scheduler.stack: 'kai' needs Kubernetes >= 1.28 (this site runs v1.23.17): use 'runai' or 'open'",
    ),
    "unknown scheduler": (
        lambda d: d["scheduler"].update(stack="slurm"),
        "scheduler.stack: Input should be 'runai', 'open', 'kai' or 'none'",
    ),
    "MIG profiles without a strategy": (
        lambda d: d.update(gpu={"mig": {"profiles": {"GZ2": "all-1g.10gb"}}}),
        "gpu.mig.profiles: given with gpu.mig.strategy 'none' (set single or mixed, or drop the profiles)",
    ),
    "MIG strategy without profiles": (
        lambda d: d.update(gpu={"mig": {"strategy": "single"}}),
        "gpu.mig.profiles: gpu.mig.strategy 'single' needs a profile per hardware class",
    ),
    "MIG profile for a class without GPUs": (
        lambda d: d.update(gpu={"mig": {"strategy": "mixed", "profiles": {"S5SP": "all-1g.10gb"}}}),
        "gpu.mig.profiles.S5SP: hardware class S5SP has no GPUs",
    ),
    "MIG profile for an unknown class": (
        lambda d: d.update(gpu={"mig": {"strategy": "single", "profiles": {"DGX": "all-1g.10gb"}}}),
        "gpu.mig.profiles.DGX: unknown hardware class",
    ),
    "MIG profile that is no profile name": (
        lambda d: d.update(gpu={"mig": {"strategy": "single", "profiles": {"GZ2": "All 1g"}}}),
        "gpu.mig.profiles.GZ2: 'All 1g' is not a mig-parted profile name (e.g. all-1g.10gb)",
    ),
    "unknown driver mode": (
        lambda d: d.update(gpu={"driver": "dkms"}),
        "gpu.driver: Input should be 'container' or 'host'",
    ),
    # hardware classes become node label values (run.ai/type=<class>)
    "hardware class with a space": (
        lambda d: (
            d["hardware_classes"].update({"QCT S5SP": d["hardware_classes"]["S5SP"]}),
            d["nodes"][0].update(hardware_class="QCT S5SP"),
        ),
        "hardware_classes.QCT S5SP: not usable as a node label value: a label value is at most 63 characters",
    ),
    "hardware class with =": (
        lambda d: (
            d["hardware_classes"].update({"type=S5SP": d["hardware_classes"]["S5SP"]}),
            d["nodes"][0].update(hardware_class="type=S5SP"),
        ),
        "hardware_classes.type=S5SP: not usable as a node label value",
    ),
    "hardware class longer than 63": (
        lambda d: (
            d["hardware_classes"].update({"S" * 64: d["hardware_classes"]["S5SP"]}),
            d["nodes"][0].update(hardware_class="S" * 64),
        ),
        "not usable as a node label value: it has 64 characters",
    ),
    "domain not a dns name": (
        lambda d: d["site"].update(domain="Run AI.example.com"),
        "site.domain: 'Run AI.example.com' is not a lower-case RFC 1123 subdomain",
    ),
    "node group label not a label key": (
        lambda d: d.update(role_vars={"node_roles_node_group_label": "run.ai/type/x"}),
        "role_vars.node_roles_node_group_label: 'run.ai/type/x' is not a label key",
    ),
    "extra cert san not a name": (
        lambda d: d.update(role_vars={"control_plane_cert_sans": ["10.0.0.1", "api server"]}),
        "role_vars.control_plane_cert_sans[1]: 'api server' is not an IP address, a DNS name",
    ),
    # TR-4858's quotas (16 GPUs) on the example's 12
    "quotas past the site's GPUs": (
        lambda d: d["scheduler"].update(
            projects=[
                {"name": n, "gpus": g}
                for n, g in (("team-a", 4), ("team-b", 2), ("team-c", 2), ("team-d", 8))
            ]
        ),
        "scheduler.projects: the quotas sum to 16 GPUs but the site has 12",
    ),
    "project of an unknown department": (
        lambda d: d["scheduler"].update(
            departments=[{"name": "research"}], projects=[{"name": "team-a", "gpus": 1, "department": "ops"}]
        ),
        "scheduler.projects[0].department: unknown department 'ops' (known: research)",
    ),
    "duplicate project": (
        lambda d: d["scheduler"].update(
            projects=[{"name": "team-a", "gpus": 1}, {"name": "team-a", "gpus": 1}]
        ),
        "scheduler.projects[1].name: duplicate project 'team-a'",
    ),
    "project name not a namespace": (
        lambda d: d["scheduler"].update(projects=[{"name": "Team_A", "gpus": 1}]),
        "scheduler.projects[0].name: 'Team_A' is not a valid project name",
    ),
    "department quota below its projects": (
        lambda d: d["scheduler"].update(
            departments=[{"name": "research", "gpus": 2}],
            projects=[{"name": "team-a", "gpus": 3, "department": "research"}],
        ),
        "scheduler.departments: 'research' has a quota of 2 GPUs, its projects 3",
    ),
    "projects without a scheduler": (
        lambda d: d["scheduler"].update(stack="none", projects=[{"name": "team-a", "gpus": 1}]),
        "scheduler.projects: given with scheduler.stack 'none'",
    ),
    "oidc issuer not https": (
        lambda d: d["scheduler"].update(
            oidc={"issuer_url": "http://idp.example/realms/x", "client_id": "k8s"}
        ),
        "scheduler.oidc.issuer_url: 'http://idp.example/realms/x' must be an https:// URL",
    ),
    "oidc without client on open": (
        lambda d: d["scheduler"].update(stack="open", oidc={"issuer_url": "https://idp.example/realms/x"}),
        "scheduler.oidc: issuer_url and client_id are both required",
    ),
    "jumpbox named like a node": (
        lambda d: d["scheduler"].update(jumpbox={"name": "gpu1", "address": "192.168.10.40"}),
        "scheduler.jumpbox.name: 'gpu1' must be a hostname that names no node",
    ),
    "researcher registry off the master": (
        lambda d: d.update(
            researcher_registry={"address": "gpu1:5001", "users": [{"name": "a", "password_file": "a"}]}
        ),
        "researcher_registry.address: 'gpu1' is not the master (master1 / 192.168.10.11)",
    ),
    "researcher registry on the system registry's port": (
        lambda d: d.update(
            researcher_registry={"address": "master1:5000", "users": [{"name": "a", "password_file": "a"}]}
        ),
        "researcher_registry.address: port 5000 is the system registry's (master1:5000)",
    ),
    "docker with the researcher registry": (
        lambda d: (
            d["kubernetes"].update(container_runtime="docker"),
            d.update(
                researcher_registry={
                    "address": "master1:5001",
                    "users": [{"name": "a", "password_file": "a"}],
                }
            ),
        ),
        "kubernetes.container_runtime: docker with researcher_registry (master1:5001): the docker path sets no "
        "pull mirror for it",
    ),
    "researcher registry without users": (
        lambda d: d.update(researcher_registry={"address": "master1:5001", "users": []}),
        "researcher_registry.users: List should have at least 1 item",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_malformed_case_names_the_field(example, case):
    mutate, expected = CASES[case]
    problems = problems_of(_mutate(example, mutate))
    assert any(expected in p for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_cli_validate_malformed_exits_2_with_one_line_and_no_traceback(example, tmp_path):
    bad = _mutate(example, lambda d: d["nodes"][2].update(name="gpu1"))
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(bad))
    r = subprocess.run(
        [sys.executable, "-m", "appliance_cli", "config", "validate", "--site", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: {tmp_path}/appliance.yml: nodes[2].name: duplicate hostname 'gpu1' (also nodes[1])"
    ]
    assert "Traceback" not in r.stderr


def test_cli_validate_example_passes(capsys):
    assert main(["config", "validate", "--site", str(EXAMPLE.parent)]) == 0
    assert "valid" in capsys.readouterr().out


def test_missing_file_and_bad_yaml(tmp_path, capsys):
    assert main(["config", "validate", "--site", str(tmp_path)]) == 2
    assert "site config not found" in capsys.readouterr().err
    (tmp_path / "appliance.yml").write_text("site: [unclosed\n")
    assert main(["config", "validate", "--site", str(tmp_path)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_init_writes_a_skeleton_that_validates(tmp_path, capsys):
    assert main(["init", str(tmp_path / "site")]) == 0
    assert load_site(tmp_path / "site").site.name
    assert main(["init", str(tmp_path / "site")]) == 2  # refuses to overwrite
    assert "--force" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["config", "validate"], ["config", "render"]])
def test_site_given_positionally_as_file_or_directory(tmp_path, capsys, command):
    shutil.copy(EXAMPLE, tmp_path / "appliance.yml")
    for site in (tmp_path / "appliance.yml", tmp_path):
        assert main([*command, str(site)]) == 0, capsys.readouterr().err
    assert main([*command, str(tmp_path), "--site", str(tmp_path)]) == 0  # the same site twice is fine


def test_two_different_sites_are_a_usage_error(tmp_path, capsys):
    assert main(["config", "validate", str(EXAMPLE.parent), "--site", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "two sites given" in err and "--site" in err


def test_one_runai_system_node_is_a_warning_not_an_error(example):
    from appliance_cli.core.siteconfig import site_warnings

    cfg = parse_site(example)
    assert site_warnings(cfg) == [
        "nodes: 1 runai-system node (master1); production wants two or more "
        "(Run:ai's system services are not redundant with one)"
    ]
    two = _mutate(example, lambda d: d["nodes"][2]["roles"].append("runai-system"))
    assert site_warnings(parse_site(two)) == []
    assert site_warnings(parse_site(_mutate(example, lambda d: d["scheduler"].update(stack="open")))) == []


def test_quotas_that_leave_gpus_to_no_project_are_a_warning(example):
    """TR-4858: "the sum of the project allocation should be equal to the number of GPUs in the
    cluster" (12 in the example: 4 + 2 + 2 + 4)."""
    from appliance_cli.core.siteconfig import site_warnings

    open_stack = _mutate(example, lambda d: d["scheduler"].update(stack="open"))
    assert site_warnings(parse_site(open_stack)) == []
    fewer = _mutate(open_stack, lambda d: d["scheduler"]["projects"][3].update(gpus=1.5))
    assert site_warnings(parse_site(fewer)) == [
        "scheduler.projects: the quotas sum to 9.5 GPUs and the site has 12: 2.5 are guaranteed to no "
        "project, only lent over quota (TR-4858 sets the sum equal to the site's GPUs)"
    ]
    none = _mutate(open_stack, lambda d: d["scheduler"].update(projects=[]))
    assert site_warnings(parse_site(none)) == []


def test_oidc_defaults_to_runai_identity_provider(example):
    from appliance_cli.core.siteconfig import oidc_settings

    runai = oidc_settings(parse_site(example))
    assert runai["issuer_url"] == f"https://{example['site']['domain']}/auth/realms/runai"
    assert (runai["client_id"], runai["username_claim"]) == ("runai", "email")
    assert (runai["username_prefix"], runai["groups_prefix"]) == ("oidc:", "")  # no groups claim: no flag
    assert oidc_settings(parse_site(_mutate(example, lambda d: d["scheduler"].update(stack="open")))) == {}
