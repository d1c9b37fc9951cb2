"""kube_upgrade refuses a node whose kubelet reports docker (dockershim) when the target is 1.24
or later (roles/kube_upgrade/tasks/versions.yml), whatever the site config says; a 1.23 target
on docker, and a 1.24 target on containerd, go on. The site config says containerd throughout. Run by Ansible against localhost with the
real kubectl and the stand-in API server (tests/_support/standin_localhost.py)."""

from __future__ import annotations

import subprocess

import pytest

from tests._support.standin_localhost import env, run_play  # noqa: F401  (env: the fixture)


def _run(env: dict, target: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    fake = env["tmp"] / "bin" / "apt-cache"  # containerd at the new bundle's version already
    fake.write_text("#!/bin/sh\nprintf 'containerd:\\n  Installed: 1.6.20\\n  Candidate: 1.6.20\\n'\n")
    fake.chmod(0o755)
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": [
        {"name": "The versions", "ansible.builtin.include_role": {"name": "kube_upgrade", "tasks_from": "versions.yml"}},
    ]}]  # fmt: skip
    extra = {"appliance_kubernetes_version": target, "appliance_container_runtime": "containerd",
             "kube_upgrade_master": "localhost",
             "kube_upgrade_kubeconfig": str(env["cluster"].kubeconfig),
             "kube_upgrade_binaries_fact_file": str(env["tmp"] / "none.fact")}  # fmt: skip
    return run_play(env, play, extra)


@pytest.mark.parametrize(
    ("runtime", "target", "refused"),
    [("docker://20.10.5", "v1.24.17", True), ("docker://20.10.5", "v1.23.17", False),
     ("containerd://1.6.20", "v1.24.17", False)],
)  # fmt: skip
def test_a_docker_node_is_refused_past_123(env, runtime: str, target: str, refused: bool) -> None:  # noqa: F811
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "localhost"}, "spec": {},
            "status": {"nodeInfo": {"kubeletVersion": "v1.23.17", "containerRuntimeVersion": runtime}}}  # fmt: skip
    env["cluster"].admin().call("POST", "/api/v1/nodes", node)
    run = _run(env, target)
    message = f"node localhost: container runtime {runtime} past 1.23 (target {target}): Kubernetes 1.24 removed dockershim"
    assert (run.returncode != 0) == refused, run.stdout[-3000:]
    assert (message in run.stdout) == refused, run.stdout[-3000:]
