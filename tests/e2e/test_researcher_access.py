"""Researcher access on an installed lab of its own (seed section 3): the site's scheduler.oidc (an
https issuer, a CA made here; there is no identity provider, the stand-in API server validates the
flags as kube-apiserver does) on the *running* API server after the install, seen where the guide
looks (the kube-apiserver-master1 mirror pod), in kubeadm's ClusterConfiguration, unchanged by a
re-run; a bad flag rolled back with one line while the API server keeps serving; the flags gone with
scheduler.oidc; `appliance user kubeconfig`; and the jumpbox.

The lab has two containers: master1 is the site's only node, worker1 is not a node at all but the
site's jumpbox (its own name, worker1's address): a plain Debian machine with no apt source, which
is what a jumpbox is. Its host key is dropped and recorded again by `appliance hosts trust`. The
lab's kubectl is the real client (Debian's, a static binary): the jumpbox needs nothing for it."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.core.siteconfig import SITE_FILE, load_site
from tests._support.lab_ssh import root_sh

# a lab of its own; APPLIANCE_E2E_OIDC_LAB names another where several people share the machine
LAB = os.environ.get("APPLIANCE_E2E_OIDC_LAB", "oid")
ISSUER = "https://idp.lab.internal/realms/lab"
ADMIN = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
MANIFEST = "/etc/kubernetes/manifests/kube-apiserver.yaml"
BACKUP = "/etc/kubernetes/appliance-backup"
FLAGS = {
    "oidc-ca-file": "/etc/kubernetes/pki/oidc-ca.crt",
    "oidc-client-id": "lab-k8s",
    "oidc-groups-claim": "groups",
    "oidc-groups-prefix": "oidc:",  # scheduler.oidc's defaults: a group system:masters is no admin
    "oidc-issuer-url": ISSUER,
    "oidc-username-claim": "email",
    "oidc-username-prefix": "oidc:",
}


def _ssh(site_dir: Path, node: str, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = root_sh(site_dir, node, command)
    assert not check or res.returncode == 0, f"{node}: {command}: {res.stderr}"
    return res


def _edit_site(site_dir: Path, fn) -> None:
    path = site_dir / SITE_FILE
    text = path.read_text()
    head = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    data = yaml.safe_load(text)
    fn(data)
    path.write_text(head + yaml.safe_dump(data, sort_keys=False))


@pytest.fixture(scope="module")
def lab(own_lab_cm, request, cli) -> Iterator[dict[str, Any]]:
    """The lab installed twice (the second run must change nothing), with OIDC and a jumpbox."""
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("rearranges the lab's nodes into a node and a jumpbox: lab only")
    with own_lab_cm(LAB, 2, request.getfixturevalue("lab_bundle")) as layout:
        site_dir = layout.site_dir
        ca = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "/dev/null", "-out", str(site_dir / "oidc-ca.pem"), "-days", "2", "-subj", "/CN=lab OIDC CA"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert ca.returncode == 0, ca.stderr
        jump_address = layout.node_address(2)

        def arrange(d: dict) -> None:
            d["nodes"] = [n for n in d["nodes"] if n["name"] == "master1"]
            for p in d["scheduler"]["projects"]:
                p["gpus"] = 0  # no gpu-worker left
            d["scheduler"]["oidc"] = {"issuer_url": ISSUER, "client_id": "lab-k8s", "groups_claim": "groups",
                                      "ca_file": "oidc-ca.pem"}  # fmt: skip
            d["scheduler"]["jumpbox"] = {"name": "jumpbox", "address": jump_address}

        _edit_site(site_dir, arrange)
        known = site_dir / "known_hosts"
        known.write_text(
            "".join(ln for ln in known.read_text().splitlines(True) if not ln.startswith("worker1,"))
        )
        trust = cli("hosts", "trust", "--site", str(site_dir), "--yes")
        runs = []
        for again in ((), ("--full",)):  # the second runs every role: they change nothing
            runs.append(cli("install", "--site", str(site_dir), "--skip-diagnose", *again))
            assert runs[-1].rc == 0, runs[-1].err[-3000:] + runs[-1].out[-3000:]
        yield {"site_dir": site_dir, "cfg": load_site(site_dir), "trust": trust, "runs": runs,
               "jump_address": jump_address}  # fmt: skip


def _apiserver_pod(site_dir: Path) -> dict:
    out = _ssh(site_dir, "master1", f"{ADMIN} get pods -n kube-system kube-apiserver-master1 -o json").stdout
    return json.loads(out)


def _oidc_of(command: list[str]) -> dict[str, str]:
    return {a[2:].partition("=")[0]: a.partition("=")[2] for a in command if a.startswith("--oidc-")}


def test_hosts_trust_records_the_jumpbox(lab):
    trust = lab["trust"]
    assert trust.rc == 0, trust.err
    assert f"jumpbox ({lab['jump_address']}): ssh-ed25519 SHA256:" in trust.out
    assert f"jumpbox,{lab['jump_address']} ssh-ed25519 " in (lab["site_dir"] / "known_hosts").read_text()


def test_the_running_api_server_has_the_oidc_flags(lab):
    pod = _apiserver_pod(lab["site_dir"])
    assert _oidc_of(pod["spec"]["containers"][0]["command"]) == FLAGS
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert (
        ready["Ready"] == "True" and pod["metadata"]["annotations"]["kubernetes.io/config.source"] == "file"
    )
    ca = _ssh(lab["site_dir"], "master1", "cat /etc/kubernetes/pki/oidc-ca.crt").stdout
    assert ca == (lab["site_dir"] / "oidc-ca.pem").read_text()


def test_a_second_install_changes_nothing(lab):
    second = lab["runs"][1]
    assert second.recap and all(r["changed"] == 0 for r in second.recap.values()), second.recap
    assert set(second.recap) == {"master1", "jumpbox"}


def test_kubeadm_config_carries_the_flags(lab):
    out = _ssh(
        lab["site_dir"], "master1", f"{ADMIN} -n kube-system get configmap kubeadm-config -o json"
    ).stdout
    cluster = yaml.safe_load(json.loads(out)["data"]["ClusterConfiguration"])
    assert {k: v for k, v in cluster["apiServer"]["extraArgs"].items() if k.startswith("oidc-")} == FLAGS


def test_installed_with_oidc_kubeadm_init_wrote_the_flags_and_nothing_else_is_in_the_manifests(lab):
    site_dir = lab["site_dir"]
    now = _ssh(site_dir, "master1", f"cat {MANIFEST}").stdout
    assert _oidc_of(yaml.safe_load(now)["spec"]["containers"][0]["command"]) == FLAGS
    # nothing to change after init: no backup yet, and never one where the kubelet would run it
    assert _ssh(site_dir, "master1", f"test -e {BACKUP}", check=False).returncode == 1
    assert _ssh(site_dir, "master1", "ls /etc/kubernetes/manifests").stdout.split() == [
        "etcd.yaml", "kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml"
    ]  # fmt: skip


def test_user_kubeconfig(lab, cli, tmp_path):
    out = tmp_path / "alice.conf"
    run = cli(
        "user",
        "kubeconfig",
        "alice",
        "--project",
        "team-a",
        "--site",
        str(lab["site_dir"]),
        "--out",
        str(out),
    )
    assert run.rc == 0, run.err
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    doc = yaml.safe_load(out.read_text())
    ca = _ssh(lab["site_dir"], "master1", "cat /etc/kubernetes/pki/ca.crt").stdout
    assert base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]).decode() == ca
    assert doc["clusters"][0]["cluster"]["server"] == "https://10.77.0.11:6443"
    (user,) = doc["users"]
    assert user["user"]["auth-provider"]["config"]["idp-issuer-url"] == ISSUER
    assert user["user"]["auth-provider"]["config"]["client-id"] == "lab-k8s"
    assert doc["contexts"][0]["context"]["namespace"] == "project-team-a"  # siteconfig.project_namespace
    assert "client-key" not in out.read_text() and "client-certificate" not in out.read_text()
    bad = cli("user", "kubeconfig", "alice", "--project", "team-x", "--site", str(lab["site_dir"]))
    assert bad.rc == 2 and "unknown project 'team-x' (known: team-a, team-b, team-c, team-d)" in bad.err


def test_the_jumpbox_has_kubectl_from_the_bundle_and_its_completion(lab):
    site_dir = lab["site_dir"]
    served = _ssh(site_dir, "master1", "sha256sum $(command -v kubectl)").stdout.split()[
        0
    ]  # the same artifact
    # the real client's completion opens with a blank line and the licence, then cobra's script
    on_jump = _ssh(site_dir, "worker1", "sha256sum /usr/local/bin/kubectl; kubectl version --client --short; "
                   "grep -m1 '^# bash completion for' /etc/bash_completion.d/kubectl; "
                   "grep -c 'complete .*-F __start_kubectl kubectl$' /etc/bash_completion.d/kubectl").stdout.split("\n")  # fmt: skip
    assert on_jump[0].split()[0] == served
    assert on_jump[1] == "Client Version: v1.20.2"  # the lab's kubectl: Debian's real client
    assert on_jump[2].startswith("# bash completion for kubectl")
    assert int(on_jump[3]) >= 1
    # a jumpbox is not a node: no apt source, no containerd, no kubelet
    assert (
        _ssh(
            site_dir, "worker1", "ls /etc/apt/sources.list.d; command -v containerd kubelet", check=False
        ).stdout
        == ""
    )
    first = lab["runs"][0]
    assert "the bash-completion package is not installed" in first.out + first.err


def _install_tag(cli, site_dir: Path, tag: str):
    return cli("install", "--site", str(site_dir), "--tags", tag)


def test_a_flag_the_api_server_refuses_is_rolled_back(lab, cli):
    site_dir = lab["site_dir"]
    before = _ssh(site_dir, "master1", f"cat {MANIFEST}").stdout
    saved = (site_dir / SITE_FILE).read_text()
    bad = dict(FLAGS, **{"oidc-ca-file": "/etc/kubernetes/pki/no-such-ca.crt"})
    _edit_site(site_dir, lambda d: d.setdefault("role_vars", {}).update(
        control_plane_oidc_flags=bad, control_plane_oidc_timeout=30, control_plane_oidc_delay=2))  # fmt: skip
    try:
        run = _install_tag(cli, site_dir, "apiserver_oidc")
    finally:
        (site_dir / SITE_FILE).write_text(saved)
    assert run.rc == 5, run.out[-2000:]
    errors = [ln for ln in run.err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, run.err
    assert "the API server did not come back with the OIDC flags within 30s" in errors[0]
    assert "restored from /etc/kubernetes/appliance-backup/kube-apiserver.yaml.prev" in errors[0]
    assert "the API server serves again as before" in errors[0]
    assert _ssh(site_dir, "master1", f"cat {MANIFEST}").stdout == before
    assert _ssh(site_dir, "master1", f"{ADMIN} get --raw /readyz").stdout.strip() == "ok"
    assert _oidc_of(_apiserver_pod(site_dir)["spec"]["containers"][0]["command"]) == FLAGS
    again = _install_tag(cli, site_dir, "apiserver_oidc")
    assert again.rc == 0 and again.recap["master1"]["changed"] == 0, again.err


def test_removing_scheduler_oidc_removes_the_flags_and_adding_it_back_on_the_running_cluster(lab, cli):
    site_dir = lab["site_dir"]
    initial = _ssh(site_dir, "master1", f"cat {MANIFEST}").stdout
    saved = (site_dir / SITE_FILE).read_text()
    _edit_site(site_dir, lambda d: d["scheduler"].pop("oidc"))
    try:
        dry = cli("install", "--site", str(site_dir), "--tags", "apiserver_oidc", "--check", "--diff")
        assert dry.rc == 0 and dry.recap["master1"]["changed"] > 0, dry.err
        assert _ssh(site_dir, "master1", f"cat {MANIFEST}").stdout == initial  # a dry run: nothing went
        gone = _install_tag(cli, site_dir, "apiserver_oidc")
        assert gone.rc == 0, gone.err
        pod = _apiserver_pod(site_dir)
        assert _oidc_of(pod["spec"]["containers"][0]["command"]) == {}
        manifest = _ssh(site_dir, "master1", f"cat {MANIFEST}").stdout
        assert "--oidc-" not in manifest
        assert _ssh(site_dir, "master1", f"cat {BACKUP}/kube-apiserver.yaml.orig").stdout == initial
        cm = _ssh(site_dir, "master1", f"{ADMIN} -n kube-system get configmap kubeadm-config -o json").stdout
        assert "oidc-" not in json.loads(cm)["data"]["ClusterConfiguration"]
        assert (
            _ssh(site_dir, "master1", "test -e /etc/kubernetes/pki/oidc-ca.crt", check=False).returncode == 1
        )
        still = _install_tag(cli, site_dir, "apiserver_oidc")
        assert still.rc == 0 and still.recap["master1"]["changed"] == 0, still.err
    finally:
        (site_dir / SITE_FILE).write_text(saved)
    # the seed's order (K2): OIDC added to a running API server
    back = _install_tag(cli, site_dir, "apiserver_oidc")
    assert back.rc == 0, back.err
    assert _oidc_of(_apiserver_pod(site_dir)["spec"]["containers"][0]["command"]) == FLAGS
    # where kubeadm init put them, every other byte kept: the file is again what init wrote
    assert _ssh(site_dir, "master1", f"cat {MANIFEST}").stdout == initial
