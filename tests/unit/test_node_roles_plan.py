"""node_roles' plan (roles/node_roles/filter_plugins/node_roles_plan.py) as plain functions:
what kubectl must change, given what `kubectl get nodes -o json` printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests._support.modules import load_filter_plugin

ROLE = Path(__file__).resolve().parents[2] / "roles" / "node_roles"
f = load_filter_plugin("node_roles", "node_roles_plan")

DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
HOSTVARS = {
    "master1": {"appliance_node_roles": ["master", "runai-system"], "appliance_hardware_class": "S5SP"},
    "worker1": {"appliance_node_roles": ["gpu-worker"], "appliance_hardware_class": "S5N-3U"},
    "worker3": {
        "appliance_node_roles": ["cpu-worker"],
        "appliance_hardware_class": "CPU",
        "node_roles_disable_gpu_operands": "yes",
    },
}


def _node(name: str, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None):
    return {"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints} if taints else {}}


def plan(items: list[dict[str, Any]], nodes: list[str] | None = None, **opts: Any) -> list[dict[str, str]]:
    o = {k: DEFAULTS[f"node_roles_{k}"] for k in (
        "role_labels", "node_group_label", "gpu_operands_label", "gpu_operands_disabled",
        "extra_labels", "taints", "taints_absent", "retired_labels", "master_taints")}  # fmt: skip
    o.update(opts)
    current = {"stdout": json.dumps({"kind": "NodeList", "items": items}), "changed": False}
    names = nodes if nodes is not None else [i["metadata"]["name"] for i in items]
    return f.node_roles_plan(current, names, HOSTVARS, **o)


def test_only_what_differs_is_planned():
    got = plan(
        [
            _node("master1", {"node-role.kubernetes.io/runai-system": "true", "run.ai/type": "S5SP"}),
            _node("worker1", {"node-role.kubernetes.io/cpu-worker": "true", "run.ai/type": "old", "x": "y"}),
            _node("worker3", {}, [{"key": "runai", "value": "drain", "effect": "NoExecute"}]),
        ],
        taints=[{"node": "worker1", "key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
        taints_absent=[{"node": "worker3", "key": "runai"}],
    )
    assert [(p["node"], p["verb"], p["arg"]) for p in got] == [
        # a master keeps its taint, Run:ai system node or not (SEED-COVERAGE K13)
        ("master1", "taint", "node-role.kubernetes.io/master:NoSchedule"),
        # the keys Run:ai reads (K1); the old cpu-worker key of earlier releases goes
        ("worker1", "label", "node-role.kubernetes.io/runai-gpu-worker=true"),
        ("worker1", "label", "run.ai/type=S5N-3U"),
        ("worker1", "label", "node-role.kubernetes.io/cpu-worker-"),  # retired
        ("worker1", "taint", "dedicated=gpu:NoSchedule"),
        ("worker3", "label", "node-role.kubernetes.io/runai-cpu-worker=true"),
        ("worker3", "label", "run.ai/type=CPU"),
        ("worker3", "label", "nvidia.com/gpu.deploy.operands=false"),  # host var "yes" is true
        ("worker3", "taint", "runai-"),
    ]


def test_a_converged_cluster_plans_nothing():
    items = [
        _node(
            "worker1",
            {
                "node-role.kubernetes.io/runai-gpu-worker": "true",
                "run.ai/type": "S5N-3U",
                "kubernetes.io/os": "linux",
            },
            [
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                {"key": "solo", "effect": "NoSchedule"},
            ],
        )
    ]
    taints = [
        {"node": "worker1", "key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"node": "worker1", "key": "solo", "effect": "NoSchedule"},
    ]
    assert plan(items, taints=taints) == []


def test_a_taint_matches_only_with_the_same_value_and_effect():
    items = [_node("worker1", {"node-role.kubernetes.io/runai-gpu-worker": "true", "run.ai/type": "S5N-3U"},
                   [{"key": "a", "value": "v", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}])]  # fmt: skip
    taints = [
        {"node": "worker1", "key": "a", "effect": "NoSchedule"},  # the node's has a value
        {"node": "worker1", "key": "b", "value": "v", "effect": "NoSchedule"},  # the node's has none
        {"node": "worker1", "key": "a", "value": "v", "effect": "NoExecute"},  # other effect
    ]
    assert [p["arg"] for p in plan(items, taints=taints)] == [
        "a:NoSchedule",
        "b=v:NoSchedule",
        "a=v:NoExecute",
    ]


def test_nodes_outside_the_run_and_unlisted_hosts():
    items = [_node("worker1", {}), _node("stranger", {})]
    # worker1 is not among the nodes to label; stranger has no host vars: only extra labels apply
    got = plan(items, nodes=["stranger"], extra_labels={"stranger": {"zone": 3}, "worker1": {"zone": 1}})
    assert got == [{"node": "stranger", "verb": "label", "arg": "zone=3"}]


def test_an_empty_node_group_label_is_off_and_not_managed():
    items = [_node("worker1", {"node-role.kubernetes.io/runai-gpu-worker": "true", "run.ai/type": "x"})]
    assert plan(items, node_group_label="") == []


def test_a_skipped_read_plans_nothing():
    """--check before the cluster exists: kubectl was skipped, the registered result has no stdout."""
    assert f.node_roles_plan({"skipped": True}, ["worker1"], HOSTVARS, {}, "", "g", [], {}, [], []) == []


def test_one_call_per_verb_and_node_labels_first():
    p = [
        {"node": "w1", "verb": "taint", "arg": "t-"},
        {"node": "w2", "verb": "label", "arg": "a=1"},
        {"node": "w1", "verb": "label", "arg": "b=2"},
        {"node": "w1", "verb": "label", "arg": "c-"},
    ]
    assert f.node_roles_calls(p) == [
        {"verb": "label", "node": "w1", "args": ["b=2", "c-"]},
        {"verb": "label", "node": "w2", "args": ["a=1"]},
        {"verb": "taint", "node": "w1", "args": ["t-"]},
    ]
    assert f.node_roles_calls([]) == []


def test_the_plan_converges_a_cluster_through_kubectl(tmp_path):
    """No made-up NodeList: nodes registered in the stand-in API server, read with kubectl as the
    role reads them, the planned calls run with kubectl as the role runs them (its argv, its
    --overwrite rule), read again: the cluster now holds what was wanted and the plan is empty."""
    from tests._support.standin_cluster import Cluster

    cluster = Cluster(tmp_path)
    try:
        for name in HOSTVARS:
            cluster.add_node(name)
        cluster.admin().call(
            "PATCH", "/api/v1/nodes/worker1",
            {"metadata": {"labels": {"node-role.kubernetes.io/cpu-worker": "true"}}},
        )  # fmt: skip

        def current() -> list[dict[str, Any]]:
            rc, out, err = cluster.kubectl("get", "nodes", "-o", "json")
            assert rc == 0, err
            return json.loads(out)["items"]

        first = plan(current())
        assert ("worker1", "label", "node-role.kubernetes.io/cpu-worker-") in [
            (p["node"], p["verb"], p["arg"]) for p in first
        ]
        for call in f.node_roles_calls(first):
            overwrite = ["--overwrite"] if [a for a in call["args"] if not a.endswith("-")] else []
            rc, _, err = cluster.kubectl(call["verb"], "node", call["node"], *call["args"], *overwrite)
            assert rc == 0, (call, err)
        after = current()
        assert plan(after) == []
        labels = {i["metadata"]["name"]: i["metadata"]["labels"] for i in after}
        master_taints = [
            t["key"] for t in next(i for i in after if i["metadata"]["name"] == "master1")["spec"]["taints"]
        ]
        assert "node-role.kubernetes.io/master" in master_taints
        assert labels["worker1"]["node-role.kubernetes.io/runai-gpu-worker"] == "true"
        assert "node-role.kubernetes.io/cpu-worker" not in labels["worker1"]
        assert labels["master1"]["run.ai/type"] == "S5SP"
    finally:
        cluster.srv.shutdown()


def test_mig_profiles_label_the_nodes_of_their_class_and_leave_others():
    """gpu.mig.profiles: mig-manager reads nvidia.com/mig.config; a class without a profile loses it."""
    labels = {"node-role.kubernetes.io/runai-gpu-worker": "true", "run.ai/type": "S5N-3U"}
    got = plan(
        [_node("worker1", dict(labels)), _node("master1", {"nvidia.com/mig.config": "all-1g.5gb"})],
        mig_config_label="nvidia.com/mig.config",
        mig_profiles={"S5N-3U": "all-3g.20gb"},
    )
    assert [(p["node"], p["arg"]) for p in got if "mig" in p["arg"]] == [
        ("worker1", "nvidia.com/mig.config=all-3g.20gb"),
        ("master1", "nvidia.com/mig.config-"),
    ]
    converged = plan(
        [_node("worker1", labels | {"nvidia.com/mig.config": "all-3g.20gb"})],
        mig_config_label="nvidia.com/mig.config",
        mig_profiles={"S5N-3U": "all-3g.20gb"},
    )
    assert converged == []
    assert DEFAULTS["node_roles_mig_config_label"] == "nvidia.com/mig.config"


def test_a_master_keeps_its_taint_and_an_untainted_one_gets_it_back():
    """K13: the master's NoSchedule stays even when it is a Run:ai system node; a cluster made by an
    earlier release (master untainted) gets it back; workers never get it."""
    taint = [{"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"}]
    labels = {"node-role.kubernetes.io/runai-system": "true", "run.ai/type": "S5SP"}
    assert plan([_node("master1", labels, taint)]) == []
    assert plan([_node("master1", labels)]) == [
        {"node": "master1", "verb": "taint", "arg": "node-role.kubernetes.io/master:NoSchedule"}
    ]
    worker = {"node-role.kubernetes.io/runai-gpu-worker": "true", "run.ai/type": "S5N-3U"}
    assert plan([_node("worker1", worker)]) == []


def test_the_labels_are_the_keys_runai_reads():
    """K1: runai-adm set node-role --gpu-worker/--cpu-worker writes runai-gpu-worker/runai-cpu-worker."""
    assert DEFAULTS["node_roles_role_labels"] == {
        "runai-system": "node-role.kubernetes.io/runai-system",
        "gpu-worker": "node-role.kubernetes.io/runai-gpu-worker",
        "cpu-worker": "node-role.kubernetes.io/runai-cpu-worker",
    }
    old = {"node-role.kubernetes.io/gpu-worker": "true", "node-role.kubernetes.io/runai-gpu-worker": "true",
           "run.ai/type": "S5N-3U"}  # fmt: skip
    assert [p["arg"] for p in plan([_node("worker1", old)])] == ["node-role.kubernetes.io/gpu-worker-"]
