"""`appliance rebuild-master --from DIR --identity FILE`: a master lost with its disk, rebuilt on a
fresh machine from the bundle and a backup copied off it, as kubeadm's own disaster-recovery
practice has it, in three runs: on the master alone, the backup's PKI and secrets back, then the
layers up to Kubernetes (rebuild-master.yml: kubeadm init uses that CA, so the workers' kubelet
certificates still chain to it and no worker is reset); etcd restored from the backup's snapshot
(restore.yml), which brings every object back, the workers' nodes included; a whole install
(site.yml), where the GPU platform and the scheduler stack converge and the workers change nothing."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from appliance_cli.cli import ui
from appliance_cli.cli.install_cmd import make_runner
from appliance_cli.cli.progress import Progress, print_recap
from appliance_cli.cli.restore_cmd import report_restored
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import agekeys, backups, bundlegate, knownhosts, sitelock
from appliance_cli.core.backups import BACKUP_ROOT
from appliance_cli.core.backups import RESTORE_STATE_FILE as STATE_FILE
from appliance_cli.core.install import install, run_playbook
from appliance_cli.core.siteconfig import load_site
from appliance_cli.runner.events import RunOptions


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rebuild-master",
        help="rebuild a lost master on a fresh machine from the bundle and a backup copied off it: its "
        "PKI and secrets put back, the master installed with that CA, etcd restored from the backup; "
        "the workers are not reset",
    )
    add_site_arg(p)
    p.add_argument(
        "--from",
        dest="source",
        metavar="DIR",
        required=True,
        help="the backup's directory as copied off the master (`appliance backup` names it "
        "YYYYMMDDTHHMMSSZ); its sha256 sums are checked here first",
    )
    p.add_argument(
        "--identity",
        metavar="FILE",
        type=Path,
        required=True,
        help="the age identity file whose public key is backup.recipient (copied to the master's tmpfs "
        "for the decryptions only)",
    )
    p.add_argument("--bundle", metavar="DIR", help="the offline bundle (default: the site's bundle.source)")
    p.add_argument("--key", metavar="PUB", help="the bundle's trusted public key (as for install)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler=cmd_rebuild)


def cmd_rebuild(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    identity = agekeys.check_identity_file(args.identity).resolve()
    copied = backups.check_copied_backup(args.source)
    master = cfg.master.name
    knownhosts.require_host_keys(cfg)
    unfinished = backups.refuse_live_master(cfg, copied.name)
    gate = bundlegate.check(cfg, bundle=args.bundle, key=args.key)
    ui.info(gate.summary)
    for line in (
        f"rebuild {master} from backup {copied.name} ({copied.path}, {len(copied.files)} files, sums checked):",
        f"  1. the bundle onto {master}; the backup copied to {master}:{BACKUP_ROOT}/{copied.name}; its PKI "
        "(/etc/kubernetes/pki) and the toolkit's secrets (/etc/appliance) decrypted and put back",
        f"  2. {master} installed up to Kubernetes (OS, registry seeded from the bundle, kubeadm init with the "
        "backup's CA, the pod network); the workers are not touched",
        "  3. etcd restored from the backup's snapshot: every object as it was then, the workers' nodes and pods "
        "included",
        "  4. a whole install, every node: the GPU platform and the scheduler stack converge; the workers, "
        "never reset, should change nothing",
    ):
        ui.info(line)
    if unfinished:
        ui.info(
            f"  an unfinished rebuild of {master} from {copied.name} is there ({STATE_FILE}): this run finishes it"
        )
    if not args.yes:
        ui.confirm(f"rebuild {master} of {cfg.site.name}?", "rebuilding")
    common = {"etcd_restore_backup": copied.name, "etcd_restore_identity_file": str(identity)}
    with sitelock.site_lock(cfg, "rebuild-master"):
        with Progress(f"rebuild {master}: secrets back, installed up to Kubernetes") as progress:
            extravars = {**gate.extravars, **common, "etcd_restore_source_dir": copied.path}
            result = run_playbook(
                make_runner(), cfg, "rebuild-master.yml", RunOptions(limit=master), progress, extravars
            )
        print_recap(result)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        with Progress(f"rebuild {master}: restore of {copied.name}") as progress:
            result = run_playbook(
                make_runner(),
                cfg,
                "restore.yml",
                RunOptions(),
                progress,
                {**common, "etcd_restore_name": stamp},
            )
        print_recap(result)
        report_restored(backups.restored(cfg), master)
        with Progress(f"rebuild {master}: install of every node") as progress:
            result = install(make_runner(), cfg, RunOptions(), progress, extravars=dict(gate.extravars))
        print_recap(result)
    ui.info(
        f"{master} is rebuilt from backup {copied.name} (install: changed={result.changed_total}); take a new "
        "`appliance backup` and copy it off: the node's SSH host keys are new"
    )
    return 0
