"""Wall time of `appliance preflight` on 4 and on 16 lab nodes (goals of issue 18: < 5 s and
< 10 s), side by side with the same facts read as one Ansible task per check (the project's own
runner, Mitogen as the site config says), and the ratio.

Prints figures; asserts nothing (benchmarks are not tests). Needs root. Brings up a lab of its own
(APPLIANCE_BENCH_LAB, default "bpf") per size and tears it down after.
usage: python bench/bench_preflight.py [--sizes 4,16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

os.environ["APPLIANCE_LAB_NAME"] = os.environ.get("APPLIANCE_BENCH_LAB", "bpf")
os.environ["CI"] = "1"

from appliance_cli import lab
from appliance_cli.core.inventory import render_inventory
from appliance_cli.core.siteconfig import load_site
from appliance_cli.runner.adapter import AnsibleRunner
from appliance_cli.runner.events import RunRequest

# The baseline: what probe.sh reads, one task per check, as a role would do it.
TASK_PER_CHECK = {
    "hostname": "hostname",
    "product_uuid": "cat /sys/class/dmi/id/product_uuid || true",
    "machine_id": "cat /etc/machine-id",
    "virt": "systemd-detect-virt || true",
    "os_release": ". /etc/os-release && echo $ID $VERSION_ID",
    "time": "date +%s.%N",
    "cpu": "nproc",
    "memory": "awk '/^MemTotal:/ {print $2}' /proc/meminfo",
    "disk": "df -P -B1 /var/lib | awk 'NR == 2 {print $4}'",
    "nics": "for d in /sys/class/net/*; do echo ${d##*/} $(cat $d/address) $(cat $d/speed 2>/dev/null); done",
    "gpus": "grep -l 0x10de /sys/bus/pci/devices/*/vendor || true",
    "nouveau": "test -d /sys/module/nouveau && echo loaded || echo no",
    "secure_boot": "test -d /sys/firmware/efi && echo efi || echo bios",
    "swap": "tail -n +2 /proc/swaps | wc -l",
    "sysctls": "cat /proc/sys/net/ipv4/ip_forward; cat /proc/sys/net/bridge/bridge-nf-call-iptables || true",
    "cgroups": "stat -fc %T /sys/fs/cgroup",
    "tools": "for t in conntrack ip iptables mount nsenter ebtables ethtool socat tc touch; do command -v $t || true; done",
    "cri_socket": "test -S /run/containerd/containerd.sock && echo present || echo absent",
    "manifests": "ls -A /etc/kubernetes/manifests 2>/dev/null | wc -l",
    "ports": "ss -ltnH",
    "name_resolution": "for n in {{ groups['all'] | join(' ') }}; do getent ahostsv4 $n | head -1; done",
    "bundle": "test -e /srv/appliance/bundle && echo present || echo absent",
}


def baseline_playbook(path: Path) -> None:
    tasks = [
        {"name": f"Check | {name}", "ansible.builtin.shell": cmd, "changed_when": False}
        for name, cmd in TASK_PER_CHECK.items()
    ]
    play = {
        "name": "Preflight, one task per check",
        "hosts": "all",
        "gather_facts": False,
        "become": True,
        "tasks": tasks,
    }
    path.write_text(yaml.safe_dump([play], sort_keys=False))


def time_preflight(site: Path) -> float:
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "appliance_cli", "preflight", str(site)], capture_output=True, text=True
    )
    dt = time.monotonic() - t0
    if r.returncode not in (0, 3):
        sys.exit(f"preflight failed (rc={r.returncode}): {r.stderr[-500:]}")
    return dt


def time_baseline(site: Path, work: Path) -> float:
    cfg = load_site(site)
    inv = render_inventory(cfg)
    baseline_playbook(work / "preflight-tasks.yml")
    t0 = time.monotonic()
    res = AnsibleRunner().run(
        RunRequest(playbook=work / "preflight-tasks.yml", inventory=inv.hosts_file,
                   private_data_dir=work / f"runs/{time.time_ns()}", mitogen=cfg.ssh.mitogen),
        lambda e: None,
    )  # fmt: skip
    dt = time.monotonic() - t0
    if not res.ok:
        sys.exit(f"baseline run failed: {res.status}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default="4,16")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    goals = {4: 5.0, 16: 10.0}
    for n in (int(s) for s in a.sizes.split(",")):
        try:
            info = lab.up(nodes=n)
            with tempfile.TemporaryDirectory() as tmp:
                pre = statistics.median(time_preflight(info.site_dir) for _ in range(a.repeat))
                base = statistics.median(time_baseline(info.site_dir, Path(tmp)) for _ in range(a.repeat))
            goal = goals.get(n)
            vs_goal = f", {pre / goal:.2f}x of the {goal:g} s goal" if goal else ""
            print(f"{n:2d} nodes: preflight {pre:5.2f} s (median of {a.repeat}){vs_goal}; "
                  f"one Ansible task per check ({len(TASK_PER_CHECK)} tasks) {base:5.2f} s; "
                  f"ratio {base / pre:.1f}x")  # fmt: skip
        finally:
            lab.down(purge=True)


if __name__ == "__main__":
    main()
