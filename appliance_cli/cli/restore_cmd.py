"""`appliance restore [--backup NAME|latest] [--yes]`: a backup's etcd snapshot restored on the master
into a new etcd data dir (the old one kept), the control plane restarted on it; resumable."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from appliance_cli.cli import ui
from appliance_cli.cli.backup_cmd import BACKUP_ROOT
from appliance_cli.cli.install_cmd import make_runner
from appliance_cli.cli.progress import Progress, print_recap
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import restoreplan, sitelock
from appliance_cli.core.install import run_playbook
from appliance_cli.core.remote import run_on
from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.errors import ApplianceError
from appliance_cli.runner.events import RunOptions

# The etcd_restore role's defaults on the master.
STATE_FILE = "/var/lib/appliance/restore/state.json"
DATA_DIR_PREFIX = "/var/lib/etcd-restore-"


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
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler=cmd_restore)


def cmd_restore(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    master = cfg.master.name
    listing = run_on(
        cfg, cfg.master, ["sh", "-c", 'ls -1 -- "$1" 2>/dev/null || true', "sh", BACKUP_ROOT], timeout=60
    ).split()
    name = restoreplan.pick_backup(listing, args.backup, BACKUP_ROOT, master)
    where = f"{BACKUP_ROOT}/{name}"
    check = 'cd -- "$1" && sha256sum --strict --quiet -c SHA256SUMS 2>&1; true'
    sums = run_on(cfg, cfg.master, ["sh", "-c", check, "sh", where])
    bad = restoreplan.failed_sums(sums)
    if bad or "No such file" in sums:
        raise ApplianceError(
            f"backup {name}: sha256 mismatch in {', '.join(bad) or 'SHA256SUMS (missing)'} (SHA256SUMS on "
            f"{master}); nothing was changed",
            hint="the backup is damaged: restore another one (--backup NAME), or copy this one back from where "
            "it was copied off",
        )
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    unfinished = restoreplan.unfinished(_state(cfg, master), name)  # a killed run's: finished, not redone
    for line in restoreplan.what_happens(name, where, master, unfinished or DATA_DIR_PREFIX + stamp):
        ui.info(line)
    if unfinished:
        ui.info(f"  an unfinished restore of {name} is on {master} ({STATE_FILE}): this run finishes it")
    if not args.yes:
        ui.confirm(f"restore {cfg.site.name} from {name}?", "restoring")
    extravars = {"etcd_restore_backup": name, "etcd_restore_name": stamp}
    with sitelock.site_lock(cfg, "restore"), Progress(f"restore of {cfg.site.name} from {name}") as progress:
        result = run_playbook(make_runner(), cfg, "restore.yml", RunOptions(), progress, extravars)
    print_recap(result)
    _report(cfg, master)
    return 0


def _state(cfg: SiteConfig, master: str) -> dict[str, Any]:
    """The restore state on the master ({} when there is none)."""
    try:
        state = json.loads(
            run_on(
                cfg, cfg.master, ["sh", "-c", 'cat -- "$1" 2>/dev/null || true', "sh", STATE_FILE], timeout=60
            )
            or "{}"
        )
    except json.JSONDecodeError:
        raise ApplianceError(f"{STATE_FILE} on {master}: no JSON in it") from None
    return state if isinstance(state, dict) else {}


def _report(cfg: SiteConfig, master: str) -> None:
    state = _state(cfg, master)
    snap = state.get("snapshot") or {}
    ui.info(
        f"restored backup {state.get('backup')} on {master}: etcd revision {snap.get('revision')}, "
        f"{snap.get('totalKey')} keys; nodes Ready: {', '.join(state.get('nodes') or [])}"
    )
    ui.info(f"etcd's data dir is {state.get('data_dir')} now (its manifest points there)")
    ui.info(
        f"the data dir it replaced is kept: {master}:{state.get('old_data_dir')}; to undo the restore, point "
        "etcd's manifest (/etc/kubernetes/manifests/etcd.yaml: --data-dir, the etcd-data hostPath and "
        "mountPath) back at it; remove it once the restored cluster is right"
    )
