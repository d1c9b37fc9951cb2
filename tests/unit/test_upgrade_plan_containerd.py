"""`appliance upgrade plan`'s containerd rows (appliance_cli/core/upgradeplan.py): per node, what it
runs (dpkg, read over SSH) against what the new bundle's apt repository carries (its Packages
index); the node's own window in the steps; docker said not to be upgraded."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import yaml

from appliance_cli.core import upgradeplan as u
from appliance_cli.core.siteconfig import parse_site
from tests.unit.test_upgrade_plan import EXAMPLE, _manifest, _site

OLD, NEW = "1.6.20~ds1-1+deb12u2", "1.6.20~ds1-1+deb12u3"
NODES = ("master1", "gpu1", "gpu2")


def _installed(kube: str = "v1.23.17", **containerd: str) -> u.Installed:
    return u.Installed(
        kube,
        dict.fromkeys(NODES, kube),
        {},
        {n: ("bookworm", containerd.get(n, NEW)) for n in NODES},
    )


def _target(kube: str = "v1.23.17", containerd: str = NEW) -> u.Target:
    target = u.target_of(_manifest(kube), {})
    target.containerd = {"bookworm": containerd}
    return target


def _bundle(tmp_path: Path, packages: str) -> tuple[Path, dict]:
    """A bundle directory holding one apt-repo artifact whose Packages index is `packages`."""
    data = packages.encode()
    digest = hashlib.sha256(data).hexdigest()
    (tmp_path / "blobs" / "sha256").mkdir(parents=True)
    (tmp_path / "blobs" / "sha256" / digest).write_bytes(data)
    gz = gzip.compress(data)
    gz_digest = hashlib.sha256(gz).hexdigest()
    (tmp_path / "blobs" / "sha256" / gz_digest).write_bytes(gz)
    art = {
        "kind": "apt-repo",
        "name": "debian-bookworm",
        "version": "bookworm",
        "apt": {"distro": "debian", "codename": "bookworm", "arch": "amd64", "packages": ["containerd"]},
        "files": [
            {"path": "Packages", "digest": f"sha256:{digest}", "size": len(data)},
            {"path": "Packages.gz", "digest": f"sha256:{gz_digest}", "size": len(gz)},
        ],
    }
    return tmp_path, {"artifacts": [*_manifest("v1.23.17")["artifacts"], art]}


def test_the_bundle_version_is_read_from_its_apt_repository(tmp_path):
    packages = (
        f"Package: containerd\nVersion: {OLD}\nArchitecture: amd64\n\n"
        f"Package: runc\nVersion: 1.1.5+ds1-1\nDescription: x\n containerd: not a field\n\n"
        f"Package: containerd\nVersion: {NEW}\nArchitecture: amd64\n"
    )
    root, manifest = _bundle(tmp_path, packages)
    assert u.containerd_of(root, manifest) == {"bookworm": NEW}  # the highest: apt's candidate
    assert u.containerd_of(root, {"artifacts": _manifest("v1.23.17")["artifacts"]}) == {}


def test_the_node_answers_give_its_containerd_and_codename():
    got = u.runtimes_from({"master1": f"{NEW}\nbookworm\n", "gpu1": "\nbookworm\n"})
    assert got == {"master1": ("bookworm", NEW), "gpu1": ("bookworm", "")}


def test_the_runtime_probe_runs_as_argv_and_its_answer_parses():
    """The probe itself, run here (Debian, like the nodes): its package is an argument, not text."""
    import platform
    import subprocess

    assert u.RUNTIME_PROBE[-1] == "containerd"
    r = subprocess.run(u.RUNTIME_PROBE, capture_output=True, text=True, check=True)
    version, codename = r.stdout.split("\n")[:2]
    assert codename == platform.freedesktop_os_release()["VERSION_CODENAME"]
    assert u.runtimes_from({"here": r.stdout}) == {"here": (codename, version)}


def test_a_containerd_row_per_node_in_each_nodes_window():
    plan = u.plan_upgrade(_site(), _installed("v1.23.5", **dict.fromkeys(NODES, OLD)), _target())
    assert plan.changes == [
        ("kubernetes", "v1.23.5", "v1.23.17"),
        *((f"containerd ({n})", OLD, NEW) for n in NODES),
    ]
    ctr = f"containerd {NEW} from the new bundle's apt repository (restarted)"
    assert plan.steps[1] == f"master1: {ctr}, kubeadm upgrade apply v1.23.17, then its kubelet and kubectl"
    assert plan.steps[2].startswith(f"gpu1: drain, {ctr}, kubeadm upgrade node, kubelet and kubectl v1.23.17")
    assert plan.steps[3].startswith(f"gpu2: drain, {ctr}, kubeadm upgrade node")
    assert plan.drained == ["gpu1", "gpu2"] and plan.passes == ["v1.23.17"]
    lines = u.render(plan, _site())
    assert f"  containerd (gpu1)     {OLD} -> {NEW}" in lines


def test_containerd_alone_drains_only_the_workers_behind_and_takes_one_pass():
    plan = u.plan_upgrade(_site(), _installed(master1=OLD, gpu2=OLD), _target())
    assert plan.changes == [("containerd (master1)", OLD, NEW), ("containerd (gpu2)", OLD, NEW)]
    ctr = f"containerd {NEW} from the new bundle's apt repository (restarted)"
    assert plan.steps == [f"master1: {ctr}, wait Ready", f"gpu2: drain, {ctr}, uncordon, wait Ready"]
    assert plan.drained == ["gpu2"] and plan.passes == ["v1.23.17"]
    lines = u.render(plan, _site())
    assert lines[1:4] == [
        f"  containerd (master1)  {OLD} -> {NEW}",
        f"  containerd (gpu2)     {OLD} -> {NEW}",
        f"  containerd (gpu1)     {NEW} (unchanged)",
    ]


def test_every_node_at_the_bundles_containerd_is_nothing_to_do():
    plan = u.plan_upgrade(_site(), _installed(), _target())
    assert plan.empty and plan.passes == []
    assert u.render(plan, _site()) == [
        "acme-ai-lab: nothing to upgrade: every component is at the bundle's version",
        *(f"  containerd ({n}){' ' * (7 - len(n))}  {NEW} (unchanged)" for n in NODES),
    ]


def test_never_a_downgrade_and_a_node_without_containerd_gets_it():
    plan = u.plan_upgrade(_site(), _installed(master1="1.7.0-1", gpu1=""), _target())
    assert plan.changes == [("containerd (gpu1)", "(not installed)", NEW)]
    assert "containerd (master1): 1.7.0-1 is newer than the bundle's " + NEW + ": kept" in plan.notes


def test_docker_is_said_not_to_be_upgraded():
    data = yaml.safe_load(EXAMPLE.read_text())
    data["kubernetes"]["container_runtime"] = "docker"
    data["nodes"] = [n for n in data["nodes"] if "gpu-worker" not in n["roles"]]  # docker: no GPU workers
    data["scheduler"].pop("projects", None)
    cfg = parse_site(data)
    plan = u.plan_upgrade(cfg, _installed(**dict.fromkeys(NODES, OLD)), _target())
    assert plan.empty
    assert u.render(plan, cfg)[1:] == [
        "container runtime docker: not upgraded by upgrade apply (only containerd is)"
    ]
    assert json.dumps(plan.notes)
