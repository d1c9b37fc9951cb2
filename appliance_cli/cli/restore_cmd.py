"""`appliance restore [--backup NAME|latest] [--yes]`: a backup's etcd snapshot restored on the master
into a new etcd data dir (the old one kept), the control plane restarted on it; resumable."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from appliance_cli.cli import ui
from appliance_cli.cli.install_cmd import make_runner
from appliance_cli.cli.progress import Progress, print_recap
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import agekeys, backups, restoreplan, sitelock
from appliance_cli.core.backups import BACKUP_ROOT
from appliance_cli.core.backups import RESTORE_DATA_DIR_PREFIX as DATA_DIR_PREFIX
from appliance_cli.core.backups import RESTORE_STATE_FILE as STATE_FILE
from appliance_cli.core.install import run_playbook
from appliance_cli.core.siteconfig import load_site
from appliance_cli.runner.events import RunOptions


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "restore",
        help="put the cluster back as a backup on the master has it: its sums checked, the control plane "
        "stopped, etcd's snapshot restored into a new data dir (the live one kept), the control plane "
        "started on it; run again after a failure, it finishes the same restore",
    )
    add_site_arg(p)
    p.add_argument(
        "--backup",
        metavar="NAME",
        default="latest",
        help=f"the backup's directory name under {BACKUP_ROOT} on the master, or latest (default)",
    )
    p.add_argument(
        "--identity",
        metavar="FILE",
        type=Path,
        help="the age identity file (age-keygen's) whose public key is backup.recipient: it opens the "
        "backup's encrypted snapshot; copied to the master's tmpfs for this run only",
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler=cmd_restore)


def cmd_restore(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    identity = agekeys.check_identity_file(args.identity) if args.identity else None
    master = cfg.master.name
    start = backups.start_restore(cfg, args.backup, identity is not None)
    name, unfinished = start.name, start.unfinished
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for line in restoreplan.what_happens(
        name, start.where, master, unfinished or DATA_DIR_PREFIX + stamp, start.encrypted
    ):
        ui.info(line)
    if unfinished:
        ui.info(f"  an unfinished restore of {name} is on {master} ({STATE_FILE}): this run finishes it")
    if not args.yes:
        ui.confirm(f"restore {cfg.site.name} from {name}?", "restoring")
    extravars = {"etcd_restore_backup": name, "etcd_restore_name": stamp}
    if start.encrypted and identity is not None:
        extravars["etcd_restore_identity_file"] = str(identity.resolve())  # a path: the key stays in it
    with sitelock.site_lock(cfg, "restore"), Progress(f"restore of {cfg.site.name} from {name}") as progress:
        result = run_playbook(make_runner(), cfg, "restore.yml", RunOptions(), progress, extravars)
    print_recap(result)
    report_restored(backups.restored(cfg), master)
    return 0


def report_restored(done: backups.Restored, master: str) -> None:
    ui.info(
        f"restored backup {done.backup} on {master}: etcd revision {done.revision}, "
        f"{done.total_keys} keys; nodes Ready: {', '.join(done.nodes)}"
    )
    ui.info(f"etcd's data dir is {done.data_dir} now (its manifest points there)")
    ui.info(
        f"the data dir it replaced is kept: {master}:{done.old_data_dir}; to undo the restore, point "
        "etcd's manifest (/etc/kubernetes/manifests/etcd.yaml: --data-dir, the etcd-data hostPath and "
        "mountPath) back at it; remove it once the restored cluster is right"
    )
