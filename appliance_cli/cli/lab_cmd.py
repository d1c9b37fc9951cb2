"""`appliance lab up|status|ssh|down`: the rehearsal lab (rendering only; see appliance_cli.lab)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

from appliance_cli.cli import ui
from appliance_cli.errors import Degraded, Unreachable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lab", help="rehearsal lab: Debian 12 nodes in systemd-nspawn on a private bridge")
    lsub = p.add_subparsers(dest="lab_command", metavar="ACTION", required=True)

    u = lsub.add_parser("up", help="create and boot the lab (node 1 = master1, the rest workers)")
    u.add_argument("--nodes", type=int, default=4, metavar="N", help="number of nodes (default: 4)")
    u.add_argument(
        "--rebuild",
        action="store_true",
        help="rebuild the cached base image, apt repo and node root filesystems",
    )
    u.add_argument(
        "--bundle",
        metavar="DIR",
        help="a built bundle to plug into master1 as its USB stick (read-only at /media/appliance-usb/bundle)",
    )
    u.add_argument(
        "--bundle-key", metavar="PUB", help="the bundle's public key, recorded in the lab's site config"
    )
    u.set_defaults(handler=cmd_up)

    s = lsub.add_parser("status", help="show the lab's nodes: running, PID, sshd answering")
    s.set_defaults(handler=cmd_status)

    sh = lsub.add_parser("ssh", help="ssh into a node (host key verified), or run CMD there")
    sh.add_argument("node", help="node name, e.g. master1")
    sh.add_argument("cmd", nargs=argparse.REMAINDER, help="command to run (default: a login shell)")
    sh.set_defaults(handler=cmd_ssh)

    d = lsub.add_parser("down", help="stop the lab and remove its network (node disks are kept)")
    d.add_argument("--purge", action="store_true", help="also delete node root filesystems (keeps the cache)")
    d.set_defaults(handler=cmd_down)


def _stepper() -> Callable[[str], None]:
    t0 = time.monotonic()

    def step(message: str) -> None:
        ui.info(f"[{time.monotonic() - t0:6.1f}s] {message}")

    return step


def cmd_up(args: argparse.Namespace) -> int:
    from appliance_cli import lab

    info = lab.up(
        nodes=args.nodes,
        rebuild=args.rebuild,
        progress=_stepper(),
        bundle=Path(args.bundle) if args.bundle else None,
        bundle_key=Path(args.bundle_key) if args.bundle_key else None,
    )
    if not info.already_up:
        ui.info(f"lab '{info.name}' up: {', '.join(f'{n.name} {n.address}' for n in info.nodes)}")
    ui.info(f"site: {info.site_dir}   ssh: appliance lab ssh master1  (or ssh -F {info.ssh_config} master1)")
    ui.info("next: appliance install --site lab")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from appliance_cli import lab
    from appliance_cli.lab.layout import LabLayout

    nodes = lab.status()
    name = LabLayout.default().name
    if not nodes:
        raise Unreachable(f"lab '{name}' is not up", hint="start it with `appliance lab up`")
    ui.info(f"{'NODE':<10} {'ADDRESS':<12} {'RUNNING':<8} {'PID':<8} SSH")
    for n in nodes:
        ui.info(
            f"{n.name:<10} {n.address:<12} {'yes' if n.running else 'no':<8} {n.pid or '-'!s:<8} "
            f"{'yes' if n.ssh else 'no'}"
        )
    down = [n.name for n in nodes if not (n.running and n.ssh)]
    if down:
        raise Degraded(
            f"lab '{name}': DEGRADED, not running or no SSH: {', '.join(down)}",
            hint="`appliance lab up` reconciles the lab",
        )
    ui.info(f"lab '{name}': up")
    return 0


def cmd_ssh(args: argparse.Namespace) -> int:
    from appliance_cli import lab

    cmd = list(args.cmd)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    argv = lab.ssh_argv(args.node, cmd or None)
    os.execvp(argv[0], argv)  # hand the terminal to ssh; its exit code is ours


def cmd_down(args: argparse.Namespace) -> int:
    from appliance_cli import lab

    lab.down(purge=args.purge, progress=_stepper())
    return 0
