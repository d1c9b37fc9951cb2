"""`appliance node drain|uncordon` (appliance_cli/core/nodeops.py, cli/node_cmd.py): the method per
stack, what goes and what stays, the refusals, and the commands run through kubectl — checked
against the stand-in API server and its kubectl for real in the last test."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.core import nodeops
from appliance_cli.core.siteconfig import parse_site
from appliance_cli.errors import UsageError

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "appliance.yml"


def _site(stack: str):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["scheduler"]["stack"] = stack
    return parse_site(copy.deepcopy(data))


def _pod(ns: str, name: str, node: str, owner: str = "", mirror: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": ns, "name": name}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    return {"metadata": meta, "spec": {"nodeName": node}}


PODS = {
    "items": [
        _pod("kube-flannel", "kube-flannel-ds-1", "gpu1", "DaemonSet"),
        _pod("team-a", "train-0", "gpu1", "Job"),
        _pod("team-a", "notebook", "gpu1", "ReplicaSet"),
        _pod("default", "bare", "gpu1"),
        _pod("team-b", "train-1", "gpu2", "Job"),
        _pod("kube-system", "kube-apiserver-master1", "master1", "Node", mirror=True),
    ]
}


def test_runai_drains_with_its_taint_and_a_cordon():
    plan = nodeops.plan_drain(_site("runai"), "gpu1", PODS)
    assert plan.method == "runai-taint"
    assert plan.commands == [
        ["cordon", "gpu1"],
        ["taint", "nodes", "gpu1", "runai=drain:NoExecute", "--overwrite"],
    ]
    assert [p.name for p in plan.evicted] == ["bare", "notebook", "train-0"]  # the flannel pod stays


def test_draining_the_only_runai_system_node_warns_and_names_the_remedy(tmp_path, capsys):
    """The guide: with no second system node, designate another before the maintenance. Here the
    system role moves from the master (which is never drained) to gpu1, then to gpu1 and gpu2."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["nodes"][0]["roles"] = ["master"]
    data["nodes"][1]["roles"] = ["gpu-worker", "runai-system"]
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    (plan_warning,) = nodeops.plan_drain(parse_site(copy.deepcopy(data)), "gpu1", PODS).warnings
    assert plan_warning.startswith(
        "gpu1 is the only runai-system node: Run:ai's system services have nowhere to go while it is drained; "
        "designate another node first"
    )
    assert "`appliance install --limit <that node>`" in plan_warning
    assert nodeops.plan_drain(parse_site(copy.deepcopy(data)), "gpu2", PODS).warnings == []
    data["nodes"][2]["roles"].append("runai-system")
    assert nodeops.plan_drain(parse_site(copy.deepcopy(data)), "gpu1", PODS).warnings == []
    data["scheduler"]["stack"] = "open"
    data["nodes"][2]["roles"] = ["gpu-worker"]
    assert nodeops.plan_drain(parse_site(copy.deepcopy(data)), "gpu1", PODS).warnings == []

    # the CLI prints it before it asks (and without --yes and a terminal, asks nothing more)
    from appliance_cli.cli import node_cmd

    node_cmd._show_drain(
        nodeops.plan_drain(
            parse_site(yaml.safe_load((tmp_path / "appliance.yml").read_text())), "gpu1", PODS
        ),
        False,
    )
    err = capsys.readouterr().err
    assert err.startswith("warning: gpu1 is the only runai-system node: ") and err.count("\n") == 1, err


def test_other_stacks_evict_with_kubectl_drain():
    plan = nodeops.plan_drain(_site("open"), "gpu1", PODS)
    assert plan.method == "evict"
    assert plan.commands == [
        ["drain", "gpu1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=10m"]
    ]
    assert [p.name for p in plan.bare] == ["bare"]
    forced = nodeops.plan_drain(_site("open"), "gpu1", PODS, force=True)
    assert forced.commands[0][-1] == "--force"


def test_a_silent_node_is_drained_without_waiting_for_pods_no_kubelet_confirms():
    """Its evicted pods stay Terminating: kubectl drain would wait its whole timeout, then fail."""
    plan = nodeops.plan_drain(_site("open"), "gpu1", PODS, force=True, silent=True)
    assert plan.commands == [
        ["drain", "gpu1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=10m", "--force",
         "--skip-wait-for-delete-timeout=1"]
    ]  # fmt: skip
    taint = nodeops.plan_drain(_site("runai"), "gpu1", PODS, silent=True)  # no eviction to wait for
    assert taint.commands == nodeops.plan_drain(_site("runai"), "gpu1", PODS).commands


def test_refusals_name_the_node():
    with pytest.raises(UsageError, match="node 'gpu9' is not in the site config") as exc:
        nodeops.plan_drain(_site("open"), "gpu9", PODS)
    assert exc.value.hint == "known nodes: master1, gpu1, gpu2"
    with pytest.raises(UsageError, match="master1 is the last control-plane node"):
        nodeops.plan_drain(_site("runai"), "master1", PODS)
    nodeops.check_node(_site("open"), "master1", draining=False)  # uncordoning it is fine


def test_uncordon_undoes_either_and_only_what_is_there():
    site = _site("runai")
    drained = {
        "spec": {"unschedulable": True, "taints": [{"key": "runai", "value": "drain", "effect": "NoExecute"}]}
    }
    assert nodeops.plan_uncordon(site, "gpu1", drained) == [
        ["taint", "nodes", "gpu1", "runai:NoExecute-"],
        ["uncordon", "gpu1"],
    ]
    assert nodeops.plan_uncordon(site, "gpu1", {"spec": {"unschedulable": True}}) == [["uncordon", "gpu1"]]
    assert nodeops.plan_uncordon(site, "gpu1", {"spec": {}}) == []


def test_drain_and_uncordon_through_kubectl(tmp_path):
    """The planned commands run by Debian's real kubectl (the lab's, tests/_support/real_kubectl.py)
    against the stand-in API server: the node is unschedulable with Run:ai's taint, then back; the
    evict method leaves daemonset pods."""
    from tests._support.standin_cluster import Cluster

    cluster = Cluster(tmp_path)
    try:
        cluster.add_node("gpu1")

        def kubectl(args: list[str]) -> str:
            rc, out, err = cluster.kubectl(*args)
            assert rc == 0, (args, err)
            return out

        site = _site("runai")
        plan = nodeops.plan_drain(site, "gpu1", nodeops.pods_doc(kubectl))
        for command in plan.commands:
            kubectl(command)
        node = json.loads(kubectl(["get", "node", "gpu1", "-o", "json"]))
        assert node["spec"]["unschedulable"] is True
        assert {"key": "runai", "value": "drain", "effect": "NoExecute"} in node["spec"]["taints"]
        undo = nodeops.plan_uncordon(site, "gpu1", node)
        for command in undo:
            kubectl(command)
        node = json.loads(kubectl(["get", "node", "gpu1", "-o", "json"]))
        assert not node["spec"].get("unschedulable") and not [
            t for t in node["spec"].get("taints") or [] if t["key"] == "runai"
        ]
        assert nodeops.plan_uncordon(site, "gpu1", node) == []  # nothing left to undo
        plan = nodeops.plan_drain(_site("open"), "gpu1", nodeops.pods_doc(kubectl))
        kubectl(plan.commands[0])
        assert json.loads(kubectl(["get", "node", "gpu1", "-o", "json"]))["spec"]["unschedulable"] is True
    finally:
        cluster.srv.shutdown()


def test_the_cli_refuses_an_unknown_node_before_any_ssh(tmp_path, capsys):
    from appliance_cli.cli.main import main

    assert main(["node", "drain", "--site", str(EXAMPLE.parent), "gpu9", "--yes"]) == 2
    err = capsys.readouterr().err
    assert "node 'gpu9' is not in the site config" in err and "Traceback" not in err
