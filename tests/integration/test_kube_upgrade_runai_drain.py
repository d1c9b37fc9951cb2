"""kube_upgrade's Run:ai drain undone (roles/kube_upgrade/tasks/worker.yml), run by Ansible against
localhost with the real kubectl and the stand-in API server (tests/_support/standin_localhost.py): a
worker an interrupted pass left cordoned and tainted runai=drain:NoExecute (the state names it
draining) is untainted, uncordoned and recorded done in the state's kube_upgrade key (module
resumable_state, read by the role's state.yml), chart_upgrade's key left as it was; a second run
finds no taint and does not fail. A state the toolkit wrote before the schema (flat) is resumed
too. The drain side (cordon and taint) runs inside the per-node upgrade, which the lab e2e covers
for the open stack's kubectl drain."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests._support.standin_localhost import env, run_play, sh  # noqa: F401  (env: the fixture)


def _run(env: dict, stack: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    tmp = env["tmp"]
    state = tmp / "upgrade" / "state.json"
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": [
        {"name": "The state", "ansible.builtin.include_role": {"name": "kube_upgrade", "tasks_from": "state.yml"}},
        {"name": "The worker", "ansible.builtin.include_role": {"name": "kube_upgrade", "tasks_from": "worker.yml"}},
    ]}]  # fmt: skip
    extra = {
        "appliance_kubernetes_version": "v1.23.17", "appliance_scheduler_stack": stack,
        "kube_upgrade_master": "localhost", "kube_upgrade_node_behind": False,
        "kube_upgrade_kubeconfig": str(env["cluster"].kubeconfig), "kube_upgrade_state_file": str(state),
    }  # fmt: skip
    return run_play(env, play, extra)


def _node(env: dict) -> dict:  # noqa: F811
    return json.loads(sh(env, "kubectl", "get", "node", "localhost", "-o", "json").stdout)


def _taints(env: dict) -> list[str]:  # noqa: F811
    return [t["key"] for t in _node(env)["spec"].get("taints") or []]


CHARTS = {"target": "v1.23.17", "charts": {"ns/r": "c 1 -> 2"}, "charts_upgrading": ""}


@pytest.mark.parametrize("legacy", [False, True], ids=["schema1", "legacy"])
def test_a_worker_left_tainted_for_runai_is_put_back_in_service(env, legacy) -> None:  # noqa: F811
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "localhost"}, "spec": {}}
    env["cluster"].admin().call("POST", "/api/v1/nodes", node)
    for args in (("cordon", "localhost"), ("taint", "nodes", "localhost", "runai=drain:NoExecute")):
        assert sh(env, "kubectl", *args).returncode == 0
    assert "runai" in _taints(env)
    state = env["tmp"] / "upgrade" / "state.json"
    state.parent.mkdir()
    kube = {"target": "v1.23.17", "done": ["master1"], "draining": "localhost"}
    if legacy:  # the flat file of the toolkit before the schema, mid-upgrade
        state.write_text(json.dumps({**kube, **CHARTS}))
    else:
        state.write_text(json.dumps({"schema": 1, "kube_upgrade": kube, "chart_upgrade": CHARTS}))

    first = _run(env, "runai")
    assert first.returncode == 0, first.stdout[-3000:]
    assert "runai" not in _taints(env) and not _node(env)["spec"].get("unschedulable")
    got = json.loads(state.read_text())
    assert got == {"schema": 1, "chart_upgrade": CHARTS,
                   "kube_upgrade": {**kube, "draining": "", "done": ["master1", "localhost"]}}  # fmt: skip
    assert oct(state.stat().st_mode & 0o777) == "0o600"
    again = _run(env, "runai")  # no taint left: kubectl says "not found", which is fine here
    assert again.returncode == 0, again.stdout[-3000:]


def test_the_open_stack_leaves_taints_alone(env) -> None:  # noqa: F811
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "localhost"}, "spec": {}}
    env["cluster"].admin().call("POST", "/api/v1/nodes", node)
    assert sh(env, "kubectl", "taint", "nodes", "localhost", "runai=drain:NoExecute").returncode == 0
    state = env["tmp"] / "upgrade" / "state.json"
    state.parent.mkdir()
    state.write_text(
        json.dumps({"schema": 1, "kube_upgrade": {"target": "v1.23.17", "done": [], "draining": "localhost"}})
    )
    run = _run(env, "open")
    assert run.returncode == 0, run.stdout[-3000:]
    assert "runai" in _taints(env)
