"""Site paths are data, never shell (issue 28): a 2-node lab of its own whose `nfs.path` and
`bundle.path` hold a space and a `;` that would run `touch` were any of them handed to a shell
unquoted (before the argv work, `appliance preflight` ran it on every node). A udisks stick mounts
at /media/USER/LABEL, and labels hold spaces: such paths must work, not merely be refused.

Preflight, install (its quick diagnose included) and diagnose all pass; the canary file exists
on no node and not on the controller; the export and the bundle copy are where the paths say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests._support.lab_nodes import run_as_root, set_nfs_export_read_only

CANARY = "/tmp/appliance-site-path-ran"
NFS_PATH = f"/srv/nfs/app liance;touch ${{IFS}}{CANARY};echo"
BUNDLE_PATH = f"/var/lib/appliance bundle;touch {CANARY}"
NODES = ("master1", "worker1")


@pytest.fixture(scope="module")
def lab(own_lab_cm, lab_bundle, cli, tmp_path_factory):
    from appliance_cli.core.siteconfig import SITE_FILE

    Path(CANARY).unlink(missing_ok=True)
    with own_lab_cm("hpath", 2, lab_bundle) as layout:
        site_file = layout.site_dir / SITE_FILE
        data = yaml.safe_load(site_file.read_text())
        data["nfs"]["path"] = NFS_PATH
        data["bundle"]["path"] = BUNDLE_PATH
        site_file.write_text(yaml.safe_dump(data, sort_keys=False))
        set_nfs_export_read_only(NFS_PATH, False)  # the lab's filer now exports the hostile path
        site = ["--site", str(layout.site_dir)]
        runs = {
            "preflight": cli("preflight", *site, timeout=600),
            "install": cli("install", *site, timeout=1800),
        }
        out = tmp_path_factory.mktemp("hpath") / "diagnose.json"
        runs["diagnose"] = cli("diagnose", str(layout.site_dir), "--quick", "--json", str(out), timeout=600)
        yield {**runs, "diagnose.json": out}


@pytest.mark.parametrize("step", ["preflight", "install", "diagnose"])
def test_preflight_install_and_diagnose_pass(lab, step):
    run = lab[step]
    assert run.rc == 0, (run.out + run.err)[-3000:]


def test_no_node_and_not_the_controller_ran_a_path(lab):
    assert not Path(CANARY).exists()
    for node in NODES:
        assert run_as_root(node, f"ls {CANARY} 2>&1 || true").strip().endswith("No such file or directory"), (
            node
        )


def test_the_paths_with_a_space_hold_what_they_name(lab):
    assert run_as_root("master1", f"test -f '{BUNDLE_PATH}/manifest.json' && echo copied").strip() == "copied"
    # the install's NFS checks wrote and removed their probe there; the export is the directory itself
    assert run_as_root("master1", f"test -d '{NFS_PATH}' && echo exported").strip() == "exported"


def test_every_node_wrote_to_the_share_by_its_path(lab):
    doc = json.loads(lab["diagnose.json"].read_text())
    writes = {r["node"]: r for r in doc["results"] if r["check"] == "nfs_write"}
    assert set(writes) == set(NODES), writes
    # a rate was measured, so the write and read-back happened by that path; a warn is the peer
    # comparison (one node below 80 % of the other's rate on a busy controller), not the path
    for r in writes.values():
        assert r["status"] in ("pass", "warn") and (r["number"] or 0) > 0, writes
