"""`appliance backup`: an etcd snapshot, every helm release's values, the cluster PKI and the
toolkit's secrets (encrypted with age to the site's backup.recipient) and kubeadm's
ClusterConfiguration in one root-only directory on the master, for the operator to copy off."""

from __future__ import annotations

import argparse
import time

from appliance_cli.cli import ui
from appliance_cli.cli.install_cmd import make_runner
from appliance_cli.cli.progress import Progress, print_recap
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import agekeys, backups, sitelock
from appliance_cli.core.install import run_playbook
from appliance_cli.core.siteconfig import SITE_FILE, load_site
from appliance_cli.errors import ConfigError
from appliance_cli.runner.events import RunOptions


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "backup",
        help="an etcd snapshot and the cluster's secrets (PKI, registry and Run:ai credentials, helm "
        "values), encrypted with age to backup.recipient, and kubeadm's ClusterConfiguration, with "
        "their sha256 sums, in one directory on the master (0700) to copy off",
    )
    add_site_arg(p)
    p.set_defaults(handler=cmd_backup)


def cmd_backup(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    if not cfg.backup.recipient:
        raise ConfigError(
            [
                f"backup.recipient: not set in {cfg.source or SITE_FILE}: a backup holds the cluster's "
                "secrets and is written only encrypted"
            ],
            hint=agekeys.HINT,
        )
    name = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    with sitelock.site_lock(cfg, "backup"), Progress(f"backup of {cfg.site.name}") as progress:
        result = run_playbook(
            make_runner(), cfg, "backup.yml", RunOptions(), progress, {"cluster_backup_name": name}
        )
    print_recap(result)
    backup = backups.read_backup(cfg, name)
    where = backup.where
    ui.info(f"backup on {cfg.master.name}: {where} ({len(backup.files)} files, sha256 sums in SHA256SUMS)")
    for f in backup.files:
        ui.info(f"  {f}" + ("  (encrypted to backup.recipient)" if f.endswith(".age") else ""))
    if backup.runai is not None:
        for line in runai_data_warnings(backup.runai):
            ui.warn(line)
    ui.info(
        f"copy it off the master, e.g. `scp -r {cfg.ssh.user}@{cfg.master.address}:{where} .` (root-only "
        "there: copy as root or with sudo); `appliance restore --identity FILE` opens it with the identity "
        "that backup.recipient belongs to, which never goes near the appliance"
    )
    return 0


def runai_data_warnings(record: dict) -> list[str]:
    """runai-backend-volumes.json -> what the operator must back up besides this directory: the
    Run:ai backend's database and metrics live on volumes, not in etcd (Run:ai's disaster-recovery
    guidance: back those PVs up)."""
    ns, vols = record.get("namespace", "runai-backend"), record.get("volumes") or []
    if not vols:
        return [
            f"Run:ai's backend has no volume claim in namespace {ns}: its database is not in this backup "
            "and was found nowhere on the cluster (an external PostgreSQL? back it up where it runs)"
        ]
    lines = [
        f"Run:ai's own data (its database, its metrics) is NOT in this backup: it lives on {len(vols)} "
        f"volume(s) of {ns}; back up each at its source (Run:ai's guidance: back up the PV), "
        "listed in runai-backend-volumes.json:"
    ]
    for v in vols:
        size = f", {v['capacity']}" if v.get("capacity") else ""
        lines.append(f"  {v['claim']} ({v['phase']}{size}): {v['source']}")
    return lines
