#!/usr/bin/env python3
"""What one Ansible task costs on a lab's nodes, whatever it does: the floor under a no-op install.

    python bench/bench_task_floor.py [--site DIR | --nodes N] [--tasks N] [--rounds R] [--run RUN_DIR]

Runs playbooks of N trivial tasks on every node of the site (the project's ansible.cfg and
Mitogen, as `appliance install` runs them): `command: true` on the node, a `set_fact` that runs on
the controller only, and a task skipped by its `when`. Each kind's baseline, side by side in each
round, is the same playbook with one task of that kind: Ansible's start, the inventory, the play
and (for a node task) Mitogen's connection to each node. Its cost per task is (N tasks - 1 task) /
(N - 1), in wall seconds and in the controller's CPU seconds (user + sys of ansible-playbook and
its workers), medians over R rounds, alternating.

With --run (a run directory of a no-op install: runs/<id>), it also counts that run's tasks by
kind from its job events and prints the time those counts take at these prices: how much of the
no-op is the per-task floor, whatever the tasks do. Prints figures; asserts nothing. Needs root.
With --site, the nodes of that lab's site (changed in nothing); else a lab of its own
(`benchfloor`, N nodes, default 4: no bundle, nothing installed), brought up and purged after."""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from appliance_cli.content import ansible_cfg
from appliance_cli.core.inventory import render_inventory
from appliance_cli.core.siteconfig import load_site
from appliance_cli.lab.layout import LabLayout
from appliance_cli.runner.adapter import mitogen_strategy_dir

KINDS: dict[str, dict[str, Any]] = {
    "node": {"ansible.builtin.command": {"argv": ["true"]}, "changed_when": False},
    "controller": {"ansible.builtin.set_fact": {"bench_floor": "{{ 1 }}"}},
    "skipped": {"ansible.builtin.command": {"argv": ["true"]}, "when": "false"},
}
# Task actions that run nothing on a node (their host-task starts are controller work only).
CONTROLLER_ONLY = {
    "assert", "set_fact", "fail", "debug", "include_role", "include_tasks", "import_role", "meta",
    "validate_argument_spec", "include_vars", "group_by", "add_host",
}  # fmt: skip


def playbook(path: Path, kind: str, tasks: int) -> Path:
    body = [{**KINDS[kind], "name": f"{kind} {i}"} for i in range(tasks)]
    path.write_text(yaml.safe_dump([{"name": "floor", "hosts": "all", "gather_facts": False, "tasks": body}]))
    return path


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, the controller's CPU seconds) of one ansible-playbook run."""
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall, after = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"error: {argv[-1]} failed (rc {r.returncode}): {r.stdout[-1500:]}{r.stderr[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_counts(run_dir: Path) -> dict[str, int]:
    """Host-task starts of a finished run by kind: on a node, controller only, skipped."""
    counts = {"node": 0, "controller": 0, "skipped": 0}
    for f in run_dir.glob("artifacts/*/job_events/*.json"):
        ev = json.loads(f.read_text())
        if ev.get("event") not in ("runner_on_ok", "runner_on_skipped", "runner_on_failed"):
            continue
        action = (ev.get("event_data") or {}).get("task_action", "").removeprefix("ansible.builtin.")
        if ev["event"] == "runner_on_skipped":
            counts["skipped"] += 1
        elif action in CONTROLLER_ONLY:
            counts["controller"] += 1
        else:
            counts["node"] += 1
    return counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--site", type=Path, default=None, help="a lab's site directory (default: the running lab's)"
    )
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--run", type=Path, default=None, help="a no-op install's run directory, to count its tasks"
    )
    ap.add_argument("--nodes", type=int, default=4, help="without --site: the size of its own lab")
    a = ap.parse_args()
    if a.site is None:
        os.environ["APPLIANCE_LAB_NAME"] = "benchfloor"
        lab(["up", "--nodes", str(a.nodes)])
        try:
            measure(a, LabLayout.default().site_dir)
        finally:
            lab(["down", "--purge"])
    else:
        measure(a, a.site)


def lab(args: list[str]) -> None:
    r = subprocess.run([sys.executable, "-m", "appliance_cli", "lab", *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: appliance lab {shlex.join(args)} failed: {r.stderr.strip()[-1000:]}")


def measure(a: argparse.Namespace, site: Path) -> None:
    cfg = load_site(site)
    hosts = len(cfg.nodes)
    env = os.environ | {
        "ANSIBLE_CONFIG": str(ansible_cfg()),
        "ANSIBLE_STRATEGY_PLUGINS": mitogen_strategy_dir(),
        "ANSIBLE_STRATEGY": "mitogen_linear",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
    }
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        inv = render_inventory(cfg, Path(tmp) / "inventory").hosts_file
        books = {}
        for k in KINDS:
            books[f"{k} x1"] = playbook(Path(tmp) / f"{k}-1.yml", k, 1)
            books[f"{k} x{a.tasks}"] = playbook(Path(tmp) / f"{k}-n.yml", k, a.tasks)
        ansible = str(Path(sys.executable).parent / "ansible-playbook")
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in books}
        print(
            f"bench_task_floor: {hosts} nodes of {site}, {a.tasks} tasks a playbook, load {os.getloadavg()[0]:.1f}"
        )
        for rnd in range(a.rounds):
            for k, book in books.items():
                got[k].append(timed([ansible, "-i", str(inv), "--become", str(book)], env))
                print(
                    f"  round {rnd + 1} {k:<16} {got[k][-1][0]:6.2f} s wall {got[k][-1][1]:6.2f} core-s",
                    flush=True,
                )
    med = statistics.median
    print()
    price: dict[str, tuple[float, float]] = {}
    for k in KINDS:
        one, many = got[f"{k} x1"], got[f"{k} x{a.tasks}"]
        wall = (med(w for w, _ in many) - med(w for w, _ in one)) / (a.tasks - 1)
        cpu = (med(c for _, c in many) - med(c for _, c in one)) / (a.tasks - 1)
        price[k] = (wall, cpu)
        print(
            f"{k:<10} per task on {hosts} nodes: {wall * 1000:6.0f} ms wall, {cpu / hosts * 1000:5.0f} ms controller "
            f"CPU per host-task (the 1-task playbook: {med(w for w, _ in one):.2f} s, {med(c for _, c in one):.2f} core-s)"
        )
    if a.run:
        counts = run_counts(a.run)
        # the start and the connections: the one-task node playbook's
        base_wall, base_cpu = med(w for w, _ in got["node x1"]), med(c for _, c in got["node x1"])
        # a task runs on every node of the run at once: its wall price is per task, on `hosts` nodes
        wall = sum(price[k][0] * n / hosts for k, n in counts.items())
        cpu = sum(price[k][1] / hosts * n for k, n in counts.items())
        print(
            f"\n{a.run.name}: host-task starts {sum(counts.values())} "
            f"({', '.join(f'{k} {n}' for k, n in counts.items())}); at these prices "
            f"{base_wall + wall:.1f} s wall and {base_cpu + cpu:.1f} controller core-s "
            f"({(base_cpu + cpu) / hosts:.1f} per node) before any task does its work"
        )


if __name__ == "__main__":
    main()
