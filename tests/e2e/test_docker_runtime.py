"""`kubernetes.container_runtime: docker` on a lab of its own (2 nodes), installed up to the runtime
(`--tags bundle_repo,os_prereqs,registry,container_runtime`). The lab site, CPU only: worker1 a
cpu-worker without GPUs and the projects without GPU quotas, as the site config refuses docker with
GPU workers (its daemon.json would drop the GPU Operator's nvidia runtime):

* every node gets Debian's docker.io 20.10 from the bundle's apt repository (nothing else is
  reachable), enabled and running, answering `docker info` with the systemd cgroup driver;
* worker1's docker pulls an image from the private registry on master1, over TLS checked against
  the registry CA the role put in /etc/docker/certs.d, with the pull account the role wrote where
  the kubelet's dockershim reads it, and runs it (runc, in the node's cgroups);
* a re-run and `install --check --diff` change nothing;
* etcd_restore's etcdutl line for docker runs the lab's etcd image under docker: it reads a real
  snapshot and restores it (the containerd line is the one test_restore_lab.py runs).

Not shown here: a kubelet on dockershim. The lab's kubelet is a stand-in that drives containerd
only (tests/standin/README.md), so the cluster steps past the runtime are not run on docker."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from appliance_cli.core.siteconfig import SITE_FILE, load_site
from appliance_cli.lab import sitegen
from tests._support.etcdutl_argv import etcdutl_argv
from tests._support.lab_nodes import run_as_root

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("APPLIANCE_E2E_SITE")), reason="brings up its own rehearsal lab: not for a real site"
)
LAB = "dkr"
TAGS = "bundle_repo,os_prereqs,registry,container_runtime"
IMAGE = "library/busybox:1.36-lab"  # the lab bundle's busybox, seeded by the registry role
KUBELET_AUTH_DIR = "/var/lib/kubelet"  # appliance_paths_kubelet_auth's directory: dockershim's config.json


@pytest.fixture(scope="module")
def docker_lab(own_lab_cm, request, cli) -> Iterator[dict[str, Any]]:
    bundle = request.getfixturevalue("lab_bundle")
    with own_lab_cm(LAB, 2, bundle) as layout:
        path = layout.site_dir / SITE_FILE
        data = yaml.safe_load(path.read_text())
        data["kubernetes"]["container_runtime"] = "docker"
        for node in data["nodes"]:
            if "gpu-worker" in node["roles"]:
                node["roles"], node["hardware_class"] = ["cpu-worker"], sitegen.EXTRA_WORKER_CLASS
        for project in data["scheduler"]["projects"]:
            project["gpus"] = 0
        path.write_text(sitegen.render_site(data))  # as `lab up` writes it
        site = ("--site", str(layout.site_dir))
        runs = {"install": cli("install", *site, "--tags", TAGS, "--skip-diagnose", timeout=1800)}
        if runs["install"].rc == 0:
            runs["again"] = cli("install", *site, "--tags", TAGS, "--skip-diagnose", timeout=900)
            runs["check"] = cli("install", *site, "--tags", TAGS, "--skip-diagnose", "--check", "--diff")
        yield {"site": load_site(layout.site_dir), "runs": runs}


def _ok(run) -> str:
    return run.out[-3000:] + run.err[-3000:]


def test_docker_installs_from_the_bundle_and_answers_with_the_systemd_driver(docker_lab):
    install = docker_lab["runs"]["install"]
    assert install.rc == 0, _ok(install)
    for node in docker_lab["site"].nodes:
        out = run_as_root(node.name, "dpkg-query -W -f '${Version}' docker.io; echo; systemctl is-enabled docker; "
                          "systemctl is-active docker; docker info --format '{{.CgroupDriver}} {{.ServerVersion}}'")  # fmt: skip
        version, enabled, active, info = out.split("\n")[:4]
        print(f"{node.name}: docker.io {version}, {enabled}, {active}, docker info: {info}")  # shown by -rP
        assert version.startswith("20.10.") and (enabled, active) == ("enabled", "active"), out
        assert info.split()[0] == "systemd" and info.split()[1].startswith("20.10."), out
        sources = run_as_root(node.name, "apt-get indextargets --format '$(URI)'").split()
        master = f"http://{docker_lab['site'].master.address}:"  # the master's bundle repo, nothing else
        assert sources and all(u.startswith(master) for u in sources), sources


def test_a_worker_pulls_from_the_private_registry_and_runs_it(docker_lab):
    site = docker_lab["site"]
    assert docker_lab["runs"]["install"].rc == 0
    worker = next(n.name for n in site.nodes if "master" not in n.roles)
    ref = f"{site.registry.address}/{IMAGE}"
    ca = run_as_root(worker, shlex.join(["ls", f"/etc/docker/certs.d/{site.registry.address}"])).split()
    assert ca == ["ca.crt"], ca
    pulled = run_as_root(worker, shlex.join(["docker", "--config", KUBELET_AUTH_DIR, "pull", ref]))
    assert f"Status: Downloaded newer image for {ref}" in pulled, pulled
    # the lab's images run a sleep loop as their entrypoint: busybox's echo instead
    said = run_as_root(
        worker,
        shlex.join(
            ["docker", "run", "--rm", "--entrypoint", "/bin/busybox", ref, "echo", "ran under docker"]
        ),
    )
    assert said.strip() == "ran under docker", said
    # without the pull account, the registry refuses: the credentials above are the role's
    refused = run_as_root(
        worker, shlex.join(["docker", "--config", "/nonexistent", "pull", ref]) + " 2>&1 || true"
    )
    assert "no basic auth credentials" in refused or "unauthorized" in refused, refused


def test_a_rerun_and_a_dry_run_change_nothing(docker_lab):
    runs = docker_lab["runs"]
    assert runs["install"].rc == 0, _ok(runs["install"])
    for what in ("again", "check"):
        print(f"{what}: {runs[what].recap}")  # shown by -rP
        assert runs[what].rc == 0, _ok(runs[what])
        assert runs[what].recap and all(v["changed"] == 0 for v in runs[what].recap.values()), (
            what,
            runs[what].recap,
        )


def test_etcd_restores_etcdutl_line_runs_under_docker(docker_lab, tmp_path):
    """etcd_restore's etcdutl through docker, as the role renders it for a docker site (docker's
    images are not in containerd's k8s.io namespace, where the containerd line looks): an etcd of
    the lab's etcd image, run by docker on master1, takes five keys and a snapshot; the role's
    status line reads it, its restore line writes a data dir from it."""
    site = docker_lab["site"]
    assert docker_lab["runs"]["install"].rc == 0
    master, image, work = (
        site.master.name,
        f"{site.registry.address}/etcd:3.5.6-0",
        "/var/lib/etcd-docker-drill",
    )
    snap = f"{work}/snap/etcd-snapshot.db"
    url = "http://127.0.0.1:23790"
    run_as_root(master, shlex.join(["mkdir", "-p", f"{work}/snap"]))
    run_as_root(master, shlex.join(["docker", "--config", KUBELET_AUTH_DIR, "pull", image]))
    run_as_root(master, shlex.join([
        "docker", "run", "-d", "--name", "drill-etcd", "--network", "host", "--volume", f"{work}:{work}",
        "--entrypoint", "/usr/local/bin/etcd", image, "--name", "drill", "--data-dir", f"{work}/data", "--listen-client-urls", url,
        "--advertise-client-urls", url, "--listen-peer-urls", "http://127.0.0.1:23800",
        "--initial-advertise-peer-urls", "http://127.0.0.1:23800", "--initial-cluster", "drill=http://127.0.0.1:23800",
    ]))  # fmt: skip
    try:
        ctl = ["docker", "exec", "drill-etcd", "/usr/local/bin/etcdctl", "--endpoints", url]
        run_as_root(
            master,
            f"for i in $(seq 50); do {shlex.join([*ctl, 'endpoint', 'health'])} && exit 0; sleep 0.2; done; exit 1",
        )
        for i in range(5):
            run_as_root(master, shlex.join([*ctl, "put", f"/drill/k{i}", f"v{i}"]))
        run_as_root(master, shlex.join([*ctl, "snapshot", "save", snap]))
    finally:
        run_as_root(master, shlex.join(["docker", "rm", "-f", "drill-etcd"]))
    argv = etcdutl_argv(tmp_path, "docker", image, snap, f"{work}/restored")
    assert argv["status"][:2] == ["docker", "run"]
    status = json.loads(
        run_as_root(master, shlex.join([*argv["status"], "snapshot", "status", snap, "-w", "json"]))
    )
    print(f"etcdutl under docker: snapshot status {status}")  # shown by -rP
    assert status["totalKey"] >= 5 and status["revision"] >= 6, status
    run_as_root(master, shlex.join([*argv["restore"], "snapshot", "restore", snap, "--name", "drill",
                                    "--data-dir", f"{work}/restored", "--initial-cluster", "drill=http://127.0.0.1:23800",
                                    "--initial-advertise-peer-urls", "http://127.0.0.1:23800"]))  # fmt: skip
    assert run_as_root(master, shlex.join(["ls", f"{work}/restored/member/snap"])).split()[-1] == "db"
    run_as_root(master, shlex.join(["rm", "-rf", work]))
