"""`appliance node add|remove` without a cluster: the site config's `removed: true` (kept in the
file, left out of cfg.nodes and of the rendered inventory), the targeted edit that marks an entry
removed, and the refusals made before anything reaches a node."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from appliance_cli.cli import node_cmd
from appliance_cli.cli.main import main
from appliance_cli.core import nodeops, siteedit
from appliance_cli.core.inventory import render_inventory
from appliance_cli.core.siteconfig import load_site, parse_site
from appliance_cli.errors import ConfigError, UsageError

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "appliance.yml"


def _data(**removed: bool) -> dict:
    """The example site, quotas within any one GPU worker (the example's need both)."""
    data = yaml.safe_load(EXAMPLE.read_text())
    for p in data["scheduler"]["projects"]:
        p["gpus"] = 1
    for node in data["nodes"]:
        if node["name"] in removed:
            node["removed"] = removed[node["name"]]
    return data


def _example_text() -> str:
    """The example's own text (comments and all), quotas within any one GPU worker."""
    return re.sub(r"gpus: \d+\}", "gpus: 1}", EXAMPLE.read_text())


def _site_dir(tmp_path: Path, text: str | None = None) -> Path:
    (tmp_path / "appliance.yml").write_text(text if text is not None else _example_text())
    return tmp_path


# --- the site config's field ---------------------------------------------------------------


def test_a_removed_entry_is_kept_aside_not_in_nodes():
    cfg = parse_site(_data(gpu2=True))
    assert [n.name for n in cfg.nodes] == ["master1", "gpu1"]
    assert [n.name for n in cfg.removed_nodes] == ["gpu2"]
    assert parse_site(_data(gpu2=False)).removed_nodes == []
    with pytest.raises(KeyError):
        cfg.node("gpu2")


def test_the_master_cannot_be_removed():
    with pytest.raises(ConfigError) as exc:
        parse_site(_data(master1=True))
    assert (
        exc.value.problems[0]
        == "appliance.yml: nodes[0].removed: master1 is the master: it cannot be removed"
    )


def test_problems_of_entries_keep_their_place_in_the_file():
    """A removed entry still holds its name: a duplicate after it is named by its file index."""
    data = _data(gpu1=True)
    data["nodes"][2]["name"] = "gpu1"
    with pytest.raises(ConfigError) as exc:
        parse_site(data)
    assert "appliance.yml: nodes[2].name: duplicate hostname 'gpu1' (also nodes[1])" in exc.value.problems


def test_quotas_count_only_the_gpus_of_nodes_still_in():
    data = _data(gpu2=True)
    have = parse_site(copy.deepcopy(_data())).hardware_classes
    gpu1 = have[data["nodes"][1]["hardware_class"]].gpu_total
    data["scheduler"]["projects"] = [{"name": "team-a", "gpus": gpu1 + 1}]
    with pytest.raises(ConfigError, match=f"the site has {gpu1}"):
        parse_site(data)


def test_the_inventory_leaves_a_removed_node_out(tmp_path):
    site = _site_dir(tmp_path, yaml.safe_dump(_data(gpu2=True), sort_keys=False))
    inv = render_inventory(load_site(site))
    hosts, group_vars = inv.hosts_file.read_text(), inv.group_vars_file.read_text()
    assert "gpu1:" in hosts and "gpu2" not in hosts
    assert "192.168.10.22" not in hosts + group_vars  # not in /etc/hosts' entries either


def test_config_validate_names_removed_nodes(tmp_path, capsys):
    site = _site_dir(tmp_path, yaml.safe_dump(_data(gpu2=True), sort_keys=False))
    assert main(["config", "validate", str(site)]) == 0
    out = capsys.readouterr().out
    assert "2 nodes" in out and "removed (left out of every run): gpu2" in out


# --- the edit of appliance.yml ---------------------------------------------------------------


def test_marking_removed_adds_one_line_to_that_entry_only():
    text = _example_text()
    out = siteedit.mark_removed(text, "gpu1")
    added = [ln for ln in out.splitlines() if ln not in text.splitlines()]
    assert added == ["    removed: true"]
    assert len(out.splitlines()) == len(text.splitlines()) + 1
    lines = out.splitlines()
    assert lines[lines.index("  - name: gpu1") + 4] == "    removed: true"  # after its roles line
    assert [n.name for n in parse_site(yaml.safe_load(out)).removed_nodes] == ["gpu1"]
    assert siteedit.mark_removed(out, "gpu1") == out  # again: nothing more


def test_comments_and_flow_entries_are_kept():
    text = (
        "# my site\n"
        "nodes:\n"
        "  - {name: a, address: 10.0.0.1, roles: [master]}  # the master\n"
        "  # the GPU box, bought 2024\n"
        "  - {name: b, address: 10.0.0.2, roles: [gpu-worker]}  # rack 3\n"
        "\n"
        "other: 1  # trailing\n"
    )
    out = siteedit.mark_removed(text, "b")
    assert out == text.replace("roles: [gpu-worker]}", "roles: [gpu-worker], removed: true}")


def test_an_existing_removed_false_is_set_not_doubled():
    text = "nodes:\n  - name: a\n    roles: [master]\n  - name: b\n    removed: false  # for now\n    roles: [x]\nz: 1\n"
    out = siteedit.mark_removed(text, "b")
    assert out == text.replace("    removed: false  # for now\n", "    removed: true\n")


def test_an_unknown_entry_or_an_unhandled_layout_writes_nothing(tmp_path):
    with pytest.raises(ConfigError, match="no entry named 'gpu9'"):
        siteedit.mark_removed(EXAMPLE.read_text(), "gpu9")
    multi_line_flow = "nodes:\n  - {name: a, roles: [master]}\n  - {name: b,\n     roles: [x]}\n"
    with pytest.raises(ConfigError, match="written in a way this edit does not handle") as exc:
        siteedit.mark_removed(multi_line_flow, "b")
    assert exc.value.hint == "add `removed: true` to b's entry by hand"
    site = _site_dir(tmp_path)
    with pytest.raises(ConfigError):
        siteedit.mark_removed_in_file(site / "appliance.yml", "gpu9")
    assert (site / "appliance.yml").read_text() == _example_text()


def test_the_file_is_written_in_place(tmp_path):
    site = _site_dir(tmp_path)
    siteedit.mark_removed_in_file(site / "appliance.yml", "gpu2")
    assert [n.name for n in load_site(site).removed_nodes] == ["gpu2"]
    assert [p.name for p in tmp_path.iterdir()] == ["appliance.yml"]  # no temporary file left


# --- refusals ----------------------------------------------------------------------------------


def test_node_add_takes_only_a_worker_entry_still_in():
    cfg = parse_site(_data(gpu2=True))
    nodeops.check_new_node(cfg, "gpu1")
    with pytest.raises(UsageError, match="master1 is the master"):
        nodeops.check_new_node(cfg, "master1")
    with pytest.raises(UsageError, match="node 'gpu9' is not in the site config"):
        nodeops.check_new_node(cfg, "gpu9")
    with pytest.raises(UsageError, match="node 'gpu2' is marked removed") as exc:
        nodeops.check_new_node(cfg, "gpu2")
    assert exc.value.hint and "removed: true" in exc.value.hint


def test_a_removed_node_is_refused_by_every_node_command():
    cfg = parse_site(_data(gpu2=True))
    for draining in (True, False):
        with pytest.raises(UsageError, match="marked removed"):
            nodeops.check_node(cfg, "gpu2", draining=draining)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["node", "add", "master1"], "master1 is the master"),
        (["node", "add", "gpu9"], "node 'gpu9' is not in the site config"),
        (["node", "remove", "master1"], "master1 is the last control-plane node: removing it"),
        (["node", "remove", "gpu9"], "node 'gpu9' is not in the site config"),
    ],
)
def test_the_cli_refuses_before_any_ssh(argv, said, tmp_path, capsys, monkeypatch):
    def no_cluster(cfg):
        raise AssertionError("reached the cluster")

    monkeypatch.setattr(node_cmd, "_kubectl", no_cluster)
    site = _site_dir(tmp_path)
    assert main([*argv, "--site", str(site), "--yes"]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert (site / "appliance.yml").read_text() == _example_text()


def test_node_add_refuses_a_member_pointing_at_rejoin(tmp_path, capsys, monkeypatch):
    asked: list[list[str]] = []

    def kubectl(args: list[str]) -> str:
        asked.append(args)
        return '{"items": [{"metadata": {"name": "gpu1"}}, {"metadata": {"name": "gpu2"}}]}'

    monkeypatch.setattr(node_cmd, "_kubectl", lambda cfg: kubectl)
    assert main(["node", "add", "gpu2", "--site", str(_site_dir(tmp_path)), "--yes"]) == 2
    err = capsys.readouterr().err
    assert "gpu2 is already a member of the cluster" in err and "appliance node rejoin gpu2" in err
    assert asked == [["get", "nodes", "-o", "json"]]


def test_labels_shown_after_a_join_leave_the_kubelets_own_out():
    doc = {
        "metadata": {
            "labels": {
                "kubernetes.io/hostname": "gpu1",
                "beta.kubernetes.io/os": "linux",
                "feature.node.kubernetes.io/cpu-x": "true",
                "run.ai/type": "S5N-3U",
                "node-role.kubernetes.io/runai-gpu-worker": "true",
            }
        }
    }
    assert nodeops.shown_labels(doc) == [
        "node-role.kubernetes.io/runai-gpu-worker=true",
        "run.ai/type=S5N-3U",
    ]


def test_node_remove_refuses_when_the_site_would_not_be_valid_without_the_node(tmp_path, capsys, monkeypatch):
    """The example's quotas need both GPU workers: refused before the cluster is asked anything."""
    monkeypatch.setattr(node_cmd, "_kubectl", lambda cfg: pytest.fail("reached the cluster"))
    site = _site_dir(tmp_path, EXAMPLE.read_text())
    assert main(["node", "remove", "gpu2", "--site", str(site), "--yes"]) == 2
    err = capsys.readouterr().err
    assert "scheduler.projects: the quotas sum to 12 GPUs but the site has" in err
    assert (site / "appliance.yml").read_text() == EXAMPLE.read_text()


def test_membership_is_read_from_the_node_list():
    nodes = '{"items": [{"metadata": {"name": "master1"}}, {"metadata": {"name": "gpu1"}}]}'
    assert nodeops.member(lambda args: nodes, "gpu1") == {"metadata": {"name": "gpu1"}}
    assert nodeops.member(lambda args: nodes, "gpu2") is None


def test_an_unreachable_node_is_named_and_the_removal_goes_on(monkeypatch, capsys):
    from appliance_cli.errors import Unreachable

    cfg = parse_site(_data())
    asked: list[list[str]] = []

    def unreachable(cfg, node, command, timeout=60):
        raise Unreachable(f"{node.name} ({node.address}): SSH cannot connect: No route to host")

    monkeypatch.setattr(node_cmd, "_kubectl", lambda cfg: lambda args: asked.append(args) or "")
    monkeypatch.setattr(nodeops, "run_on", unreachable)
    plan = nodeops.DrainPlan("gpu2", "evict", [["drain", "gpu2", "--ignore-daemonsets"]], [])
    assert node_cmd._remove(cfg, cfg.node("gpu2"), plan, reset=True) is False
    assert asked == [
        ["drain", "gpu2", "--ignore-daemonsets"],
        ["delete", "node", "gpu2", "--ignore-not-found"],
    ]
    said = capsys.readouterr()
    assert "gpu2 (192.168.10.22): SSH cannot connect: No route to host: not reset" in said.out + said.err
