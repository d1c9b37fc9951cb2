"""kube_upgrade's containerd decision (roles/kube_upgrade/tasks/versions.yml), run by Ansible
against localhost with the real kubectl and the stand-in API server (tests/_support/standin_localhost.py)
and an `apt-cache` on PATH that answers as apt does once the node read the new bundle's
repository: another Installed than Candidate makes the node behind (then upgraded in its
window, which the lab e2e shows); equal, or no candidate, does not; a docker node never asks.
The same in check mode (the read runs in a dry run too)."""

from __future__ import annotations

import json
import re

import pytest

from tests._support.standin_localhost import env, run_play  # noqa: F401  (env: the fixture)

TARGET = "v1.23.17"
OLD, NEW = "1.6.20~ds1-1+deb12u2", "1.6.20~ds1-1+deb12u3"


def _decide(env: dict, installed: str, candidate: str, runtime: str = "containerd", *flags: str):  # noqa: F811
    tmp = env["tmp"]
    asked = tmp / "apt-cache-asked"
    asked.unlink(missing_ok=True)
    fake = tmp / "bin" / "apt-cache"
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {asked}\n'
        f"printf 'containerd:\\n  Installed: {installed}\\n  Candidate: {candidate}\\n  Version table:\\n'\n"
    )
    fake.chmod(0o755)
    facts = tmp / "appliance_kube.fact"
    facts.write_text(json.dumps({"kubeadm": TARGET, "kubelet": TARGET, "kubernetes": TARGET}))
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": [
        {"name": "Versions", "ansible.builtin.include_role": {"name": "kube_upgrade", "tasks_from": "versions.yml"}},
        {"name": "Say", "ansible.builtin.debug": {
            "msg": "DECIDED runtime={{ kube_upgrade_runtime_behind }} node={{ kube_upgrade_node_behind }}"}},
    ]}]  # fmt: skip
    extra = {
        "appliance_kubernetes_version": TARGET, "appliance_container_runtime": runtime,
        "kube_upgrade_master": "localhost", "kube_upgrade_kubeconfig": str(env["cluster"].kubeconfig),
        "kube_upgrade_binaries_fact_file": str(facts),
    }  # fmt: skip
    run = run_play(env, play, extra, *flags)
    assert run.returncode == 0, run.stdout[-3000:]
    m = re.search(r"DECIDED runtime=(\w+) node=(\w+)", run.stdout)
    assert m, run.stdout[-3000:]
    return m.group(1) == "True", m.group(2) == "True", asked.read_text() if asked.exists() else ""


@pytest.fixture
def node_env(env):  # noqa: F811
    """A node at the target Kubernetes version (kubelet, binaries): only containerd can make it behind."""
    env["cluster"].add_node("localhost")
    return env


@pytest.mark.parametrize("flags", [(), ("--check",)])
def test_another_installed_containerd_makes_the_node_behind(node_env, flags):
    assert _decide(node_env, OLD, NEW, "containerd", *flags) == (True, True, "policy containerd\n")


def test_the_bundles_containerd_or_none_leaves_the_node_alone(node_env):
    assert _decide(node_env, NEW, NEW)[:2] == (False, False)
    assert _decide(node_env, "(none)", "(none)")[:2] == (False, False)  # no containerd in the bundle


def test_a_docker_node_never_asks(node_env):
    assert _decide(node_env, OLD, NEW, "docker") == (False, False, "")
