"""etcd_restore's etcdutl command lines (roles/etcd_restore/tasks/etcdutl.yml), rendered by Ansible
on localhost for each runtime: on containerd, `ctr run` in the CRI's k8s.io namespace; on docker,
`docker run`, as docker's images are not in containerd's store (dockershim, Kubernetes 1.23). Both
are argv lists whose paths and image are single elements, never shell text. The lab runs the
containerd line for real (tests/e2e/test_restore_lab.py) and the docker line against Debian's
docker.io with the lab's etcd image (tests/e2e/test_docker_runtime.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests._support.etcdutl_argv import etcdutl_argv as role_argv

IMAGE = "master1:5000/etcd:3.5.6-0"
SNAP = "/var/lib/appliance/restore/work dir/etcd-snapshot.db"  # a space: one argv element all the same


def etcdutl_argv(tmp: Path, runtime: str, snapshot: str = SNAP) -> dict[str, list[str]]:
    return role_argv(tmp, runtime, IMAGE, snapshot, "/var/lib/etcd-restore-20261130T000000Z")


def test_containerd_runs_etcdutl_through_ctr_in_the_cri_namespace(tmp_path: Path) -> None:
    argv = etcdutl_argv(tmp_path, "containerd")
    work = os.path.dirname(SNAP)
    assert argv["status"] == [
        "ctr", "-n", "k8s.io", "run", "--rm", "--net-host",
        "--mount", f"type=bind,src={work},dst={work},options=rbind:ro",
        "--mount", "type=bind,src=/var/lib,dst=/var/lib,options=rbind:rw",
        IMAGE, "etcd-restore-20261130T000000Z-status", "etcdutl",
    ]  # fmt: skip
    assert argv["restore"][-2:] == ["etcd-restore-20261130T000000Z-restore", "etcdutl"]


def test_docker_runs_etcdutl_through_docker_with_the_same_mounts(tmp_path: Path) -> None:
    argv = etcdutl_argv(tmp_path, "docker")
    work = os.path.dirname(SNAP)
    assert argv["status"] == [
        "docker", "run", "--rm", "--network", "host",
        "--volume", f"{work}:{work}:ro", "--volume", "/var/lib:/var/lib:rw",
        "--name", "etcd-restore-20261130T000000Z-status", "--entrypoint", "etcdutl", IMAGE,
    ]  # fmt: skip
    assert argv["restore"][-5:] == [
        "--name",
        "etcd-restore-20261130T000000Z-restore",
        "--entrypoint",
        "etcdutl",
        IMAGE,
    ]


@pytest.mark.parametrize("runtime", ["containerd", "docker"])
def test_a_hostile_path_stays_one_element(tmp_path: Path, runtime: str) -> None:
    hostile = "/tmp/x; touch /tmp/owned $(id)/etcd-snapshot.db"
    argv = etcdutl_argv(tmp_path, runtime, hostile)["status"]
    assert any(os.path.dirname(hostile) in a for a in argv)
    assert "touch" not in argv and "$(id)/etcd-snapshot.db" not in argv
