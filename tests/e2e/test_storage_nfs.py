"""storage_nfs on the installed lab: the provisioner release from the bundle's chart, its image
pulled through the CRI, the default StorageClass, a re-run that changes nothing; then the export
broken on purpose (dropped from one node, read-only for all), each one line naming the nodes, and
the release uninstalled and put back. Uses the session lab (installed by `installs`).
Breaks the filer for a moment: on a real site (APPLIANCE_E2E_SITE) only with
APPLIANCE_E2E_DESTRUCTIVE=1."""

from __future__ import annotations

import json
import os
import re

import pytest

pytestmark = pytest.mark.usefixtures("installs")

HELM = "helm --kubeconfig /etc/kubernetes/admin.conf -n nfs-provisioner"
KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
RELEASE = "nfs-subdir-external-provisioner"
IMAGE = "sig-storage/nfs-subdir-external-provisioner:v4.0.2"
NFS_PORTS = "111,2049,20048"  # portmapper, nfs, ganesha's mountd


def _nfs_run(cli, site, *extra):
    return cli("install", "--site", str(site.site_dir), "--tags", "storage_nfs", *extra)


def _broken(cli, site) -> tuple[str, str]:
    """(preflight's lines about the export, the role's one error line): the install's preflight
    refuses first (exit 3); past it (--skip-preflight) the role stops the run (exit 5)."""
    pre = cli("preflight", str(site.site_dir))
    assert pre.rc == 3, (pre.rc, pre.out[-2000:], pre.err[-2000:])
    export = f"{site.nfs.server}:{site.nfs.path}"
    pre_lines = "\n".join(ln for ln in (pre.out + pre.err).splitlines() if export in ln)
    return pre_lines, _one_error_line(_nfs_run(cli, site, "--skip-preflight"))


def _destructive_ok():
    if os.environ.get("APPLIANCE_E2E_SITE") and os.environ.get("APPLIANCE_E2E_DESTRUCTIVE") != "1":
        pytest.skip("breaks the NFS export: set APPLIANCE_E2E_DESTRUCTIVE=1 to run it on a real site")


def _one_error_line(run) -> str:
    """The run failed with exactly one line naming the NFS export; that line."""
    assert run.rc == 5, (run.rc, run.out[-2000:], run.err[-2000:])
    assert "Traceback" not in run.out + run.err
    # the progress shows the failed task as it happens (stdout); the error is one line (stderr)
    lines = [ln for ln in run.err.splitlines() if "NFS export " in ln]
    assert len(lines) == 1, run.err[-3000:]
    return lines[0]


def test_the_release_is_installed_from_the_bundles_chart(site, installs, hosts):
    assert installs[0].rc == 0, installs[0].out[-3000:]
    master = hosts[site.master.name]
    [rel] = json.loads(master.check_output(f"{HELM} list -o json"))
    assert (rel["name"], rel["chart"], rel["app_version"], rel["status"]) == (
        RELEASE, "nfs-subdir-external-provisioner-4.0.18", "4.0.2", "deployed"
    )  # fmt: skip
    values = json.loads(master.check_output(f"{HELM} get values {RELEASE} -o json"))
    assert values["image"] == {"repository": f"{site.registry.address}/sig-storage/nfs-subdir-external-provisioner",
                               "tag": "v4.0.2"}  # fmt: skip
    assert values["nfs"] == {"server": site.nfs.server, "path": site.nfs.path}
    assert values["storageClass"] == {
        "create": False,
        "provisionerName": "k8s-sigs.io/nfs-subdir-external-provisioner",
    }
    assert master.file(f"/etc/appliance/helm/{RELEASE}.values.yaml").mode == 0o600


def test_the_image_was_pulled_through_the_cri_on_a_worker(site, hosts):
    worker = next(n.name for n in site.nodes if "master" not in n.roles)
    refs = hosts[worker].check_output("ctr -n k8s.io images ls -q").split()
    assert f"{site.registry.address}/{IMAGE}" in refs


def test_the_nfs_storage_class_is_the_default(site, hosts):
    sc = json.loads(hosts[site.master.name].check_output(f"{KUBECTL} get storageclass nfs-client -o json"))
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert sc["provisioner"] == "k8s-sigs.io/nfs-subdir-external-provisioner"
    assert sc["reclaimPolicy"] == "Delete"


def test_every_node_has_the_clients_and_the_export_is_left_clean(site, hosts):
    for n in site.nodes:
        assert hosts[n.name].package("libnfs-utils").is_installed, n.name
        assert hosts[n.name].package("nfs-common").is_installed, n.name
    listing = hosts[site.master.name].check_output(
        f"nfs-ls 'nfs://{site.nfs.server}{site.nfs.path}?uid=0&gid=0'"
    )
    assert ".appliance-probe-" not in listing  # every node's probe file was removed again


def test_a_rerun_changes_nothing(site, cli):
    run = _nfs_run(cli, site)
    assert run.rc == 0, run.out[-3000:]
    assert {h: s["changed"] for h, s in run.recap.items()} == {n.name: 0 for n in site.nodes}


def test_an_export_unreachable_from_one_node_is_one_line_naming_it(site, cli, hosts):
    _destructive_ok()
    victim = [n.name for n in site.nodes if "master" not in n.roles][-1]
    node = hosts[victim]
    rules = [
        f"OUTPUT -d {site.nfs.server} -p {proto} -m multiport --dports {NFS_PORTS} -j DROP"
        for proto in ("tcp", "udp")
    ]
    for rule in rules:
        node.check_output(f"iptables -I {rule}")
    try:
        pre, line = _broken(cli, site)
    finally:
        for rule in rules:
            node.run(f"iptables -D {rule}")
    assert node.run(f"iptables -C {rules[0]}").rc != 0, "the drop rule is still there"
    assert f"NFS export {site.nfs.server}:{site.nfs.path}: {victim}: not reachable (" in line
    others = [n.name for n in site.nodes if n.name != victim]
    assert line.startswith(f"error: {victim}: "), line  # the run's error names the node
    assert not [o for o in others if o in line], line  # and only the node that cannot reach it
    assert "hint:" in line
    assert f"{site.nfs.server}:{site.nfs.path} not reachable" in pre and victim in pre, pre
    assert not [o for o in others if o in pre], pre


def test_a_read_only_export_is_one_line_naming_every_node(site, cli):
    _destructive_ok()
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("switches the lab filer's export: the lab's own nfs-ganesha")
    from tests._support.lab_nodes import set_nfs_export_read_only

    set_nfs_export_read_only(site.nfs.path, True)
    try:
        pre, line = _broken(cli, site)
    finally:
        set_nfs_export_read_only(site.nfs.path, False)
    for n in site.nodes:
        assert re.search(rf"\b{n.name}: read-only \([^)]*NFS3ERR_ROFS", line), (n.name, line)
        assert n.name in pre, (n.name, pre)
    assert f"{site.nfs.server}:{site.nfs.path} read-only" in pre


def test_the_release_uninstalled_is_put_back(site, cli, hosts):
    master = hosts[site.master.name]
    master.check_output(f"{HELM} uninstall {RELEASE}")
    assert json.loads(master.check_output(f"{HELM} list -o json")) == []
    run = _nfs_run(cli, site)
    assert run.rc == 0, run.out[-3000:]
    assert run.recap[site.master.name]["changed"] >= 1
    [rel] = json.loads(master.check_output(f"{HELM} list -o json"))
    assert (rel["name"], rel["status"]) == (RELEASE, "deployed")
