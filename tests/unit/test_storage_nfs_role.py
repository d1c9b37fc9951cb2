"""roles/storage_nfs: the chart values and the StorageClass it renders from the site's NFS
export, rendered by Ansible's own templating from the role's defaults; the image it pulls is the
one the bundle carries; the probe module's classification of what the client says."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests._support.modules import load_role_module

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "storage_nfs"
SITE = {
    "appliance_nfs_server": "10.77.0.11",
    "appliance_nfs_path": "/srv/nfs/appliance",
    "appliance_registry_address": "master1:5000",
    "groups": {"masters": ["master1"], "workers": ["worker1", "worker2"]},
}


def _render(expr: str, **overrides: object) -> object:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    variables = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in defaults.items()}
    variables |= SITE | overrides
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expr))


def test_values_point_the_chart_at_the_private_registry_and_the_site_export() -> None:
    values = _render("{{ storage_nfs_values }}")
    assert values == {
        "image": {"repository": "master1:5000/sig-storage/nfs-subdir-external-provisioner", "tag": "v4.0.2"},
        "nfs": {"server": "10.77.0.11", "path": "/srv/nfs/appliance"},
        "storageClass": {"create": False, "provisionerName": "k8s-sigs.io/nfs-subdir-external-provisioner"},
    }


def test_extra_values_merge_recursively() -> None:
    values = _render(
        "{{ storage_nfs_values }}",
        storage_nfs_extra_values={"nfs": {"mountOptions": ["nfsvers=4.1"]}, "replicaCount": 2},
    )
    assert isinstance(values, dict)
    assert values["nfs"] == {
        "server": "10.77.0.11",
        "path": "/srv/nfs/appliance",
        "mountOptions": ["nfsvers=4.1"],
    }
    assert values["replicaCount"] == 2 and values["storageClass"]["create"] is False


def test_no_nfs_in_the_site_means_no_server() -> None:
    assert _render("{{ storage_nfs_server }}", appliance_nfs_server="") == ""


def test_the_first_worker_pulls_the_image_else_the_master() -> None:
    assert _render("{{ storage_nfs_pull_node }}") == "worker1"
    assert _render("{{ storage_nfs_pull_node }}", groups={"masters": ["master1"], "workers": []}) == "master1"


def test_a_node_the_run_lost_pulls_nothing() -> None:
    """appliance_nodes_lost (playbooks/tasks/nodes-lost.yml): the next worker still in the run, in order."""
    assert _render("{{ storage_nfs_pull_node }}", appliance_nodes_lost=["worker1"]) == "worker2"
    lost = ["worker1", "worker2", "worker3"]
    assert _render("{{ storage_nfs_pull_node }}", appliance_nodes_lost=lost) == "master1"


def test_the_image_is_the_one_the_bundles_carry() -> None:
    """Tag = the values file's; the upstream reference is in the lab and production profiles."""
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values = yaml.safe_load((REPO / "bundles/values/nfs-subdir-external-provisioner-4.0.18.yaml").read_text())
    assert defaults["storage_nfs_image_tag"] == values["image"]["tag"]
    upstream = f"{values['image']['repository']}:{values['image']['tag']}"
    assert upstream.split("/", 1)[1].rsplit(":", 1)[0] == "sig-storage/nfs-subdir-external-provisioner"
    for profile in ("lab", "appliance-k8s1.23"):
        prof = yaml.safe_load((REPO / f"bundles/profiles/{profile}.yml").read_text())
        assert upstream in [i["reference"] for i in prof["images"]], profile
        chart = next(c for c in prof["charts"] if c["name"] == defaults["storage_nfs_chart"])
        assert chart["images"] == [upstream], profile


def test_storage_class_manifest() -> None:
    text = (ROLE / "templates/etc/kubernetes/addons/nfs-storageclass.yml.j2").read_text()
    manifest = yaml.safe_load(_render(text, ansible_managed="managed", storage_nfs_mount_options=["hard"]))
    assert manifest["kind"] == "StorageClass" and manifest["metadata"]["name"] == "nfs-client"
    assert manifest["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert manifest["provisioner"] == "k8s-sigs.io/nfs-subdir-external-provisioner"
    assert manifest["reclaimPolicy"] == "Delete" and manifest["parameters"] == {"archiveOnDelete": "true"}
    assert manifest["mountOptions"] == ["hard"]
    off = yaml.safe_load(_render(text, ansible_managed="m", storage_nfs_default_class=False))
    assert off["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "false"}
    assert "mountOptions" not in off


@pytest.fixture(scope="module")
def probe():
    return load_role_module("storage_nfs", "nfs_export_probe")


def test_probe_urls_ask_as_root(probe) -> None:
    assert probe.url("10.77.0.11", "/srv/nfs/appliance") == "nfs://10.77.0.11/srv/nfs/appliance?uid=0&gid=0"
    assert probe.url("f", "/a/", ".p-w1") == "nfs://f/a/.p-w1?uid=0&gid=0"


@pytest.mark.parametrize(
    ("said", "problem"),
    [
        ('creat call failed with "NFS: CREATE of /.p failed with NFS3ERR_ROFS(-30)"', "read-only"),
        ('creat call failed with "NFS: CREATE of /.p failed with NFS3ERR_ACCES(-13)"', "not writable"),
    ],
)
def test_write_failures_are_classified(probe, said: str, problem: str) -> None:
    assert probe.classify_write(said) == problem


def test_probe_without_the_client_says_so(probe, monkeypatch) -> None:
    monkeypatch.setattr(probe.shutil, "which", lambda _: None)
    r = probe.probe("10.77.0.11", "/srv", "x", 1)
    assert r["problem"] == "no client" and "libnfs-utils" in r["detail"]


def test_probe_reads_free_space_and_reports_an_unreachable_export(probe, monkeypatch) -> None:
    monkeypatch.setattr(probe.shutil, "which", lambda name: f"/usr/bin/{name}")
    calls = []

    def fake(argv, timeout):
        calls.append(argv[0])
        if argv[0] == "nfs-ls":
            return 0, "-rw-r--r-- 1 0 0 3 a\n\n   1000 of    5000 bytes free.\n", ""
        return 0, "copied 34 bytes", ""

    monkeypatch.setattr(probe, "_run", fake)
    monkeypatch.setattr(probe, "unlink", lambda *a: "")
    assert probe.probe("s", "/p", "x", 1) == {
        "changed": False,
        "problem": "",
        "detail": "",
        "free_bytes": 1000,
    }
    assert calls == ["nfs-ls", "nfs-cp"]
    monkeypatch.setattr(probe, "_run", lambda argv, timeout: (124, "", "no answer within 1s"))
    r = probe.probe("s", "/p", "x", 1)
    assert (r["problem"], r["detail"]) == ("not reachable", "no answer within 1s")


def test_a_refused_write_names_the_servers_answer_not_the_probe_file(probe, monkeypatch) -> None:
    monkeypatch.setattr(probe.shutil, "which", lambda name: f"/usr/bin/{name}")
    said = 'Failed to creat file /.p-w1: creat call failed with "NFS: CREATE of /.p-w1 failed with NFS3ERR_ROFS(-30)"'
    monkeypatch.setattr(
        probe,
        "_run",
        lambda argv, timeout: (0, "1 of 2 bytes free.", "") if argv[0] == "nfs-ls" else (10, "", said),
    )
    r = probe.probe("s", "/p", ".p-w1", 1)
    assert (r["problem"], r["detail"], r["free_bytes"]) == ("read-only", "nfs-cp: NFS3ERR_ROFS(-30)", 1)


def test_the_result_names_the_node_in_one_line(probe, monkeypatch) -> None:
    monkeypatch.setattr(probe.shutil, "which", lambda name: f"/usr/bin/{name}")
    seen = []
    monkeypatch.setattr(
        probe, "_run", lambda argv, timeout: seen.append(argv) or (124, "", "no answer within 3s")
    )
    r = probe.result("worker2", "10.77.0.11", "/srv/nfs/appliance", 3)
    assert (r["node"], r["summary"]) == ("worker2", "worker2: not reachable (no answer within 3s)")
    assert seen == [["nfs-ls", "-s", "nfs://10.77.0.11/srv/nfs/appliance?uid=0&gid=0"]]
    monkeypatch.setattr(probe, "probe", lambda *a: {"problem": "", "detail": ""})
    assert probe.result("worker2", "s", "/p", 3)["summary"] == ""
