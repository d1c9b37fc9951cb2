"""`appliance restore`'s pure part: which backup (a name or `latest`), which of its files fail
their sums, and the lines that say what the restore will do."""

from __future__ import annotations

import re

from appliance_cli.core.opstate import EtcdRestore
from appliance_cli.errors import ApplianceError, UsageError

# `appliance backup` names each backup by the UTC time it started (cluster_backup_name).
BACKUP_NAME = re.compile(r"\d{8}T\d{6}Z")


def pick_backup(listing: list[str], wanted: str, root: str, master: str) -> str:
    """The backup `wanted` names among `listing` (the directory names under root on the master)."""
    names = sorted(n for n in listing if BACKUP_NAME.fullmatch(n))
    if wanted == "latest":
        if not names:
            raise ApplianceError(
                f"no backup on {master} under {root}",
                hint="`appliance backup` makes one (a backup copied off the master goes back under that directory)",
            )
        return names[-1]
    if not BACKUP_NAME.fullmatch(wanted):
        raise UsageError(
            f"--backup {wanted}: not a backup name (YYYYMMDDTHHMMSSZ, as `appliance backup` prints) or latest"
        )
    if wanted not in names:
        have = ", ".join(names[-5:]) if names else "none"
        raise ApplianceError(
            f"--backup {wanted}: no such backup on {master} under {root}",
            hint=f"the backups there (latest last): {have}",
        )
    return wanted


def failed_sums(output: str) -> list[str]:
    """The files `sha256sum --strict --quiet -c SHA256SUMS` reports (FAILED, or FAILED open or read)."""
    return [m.group(1) for m in re.finditer(r"^(.+?): FAILED\b", output, re.M)]


def unfinished(state: EtcdRestore, name: str) -> str | None:
    """The new data dir of an unfinished restore of backup `name` (a killed run's), else None; an
    unfinished restore of another backup is refused: it must be finished first."""
    if state.phase not in ("stopping", "restored"):
        return None
    if state.backup != name:
        raise ApplianceError(
            f"an unfinished restore from backup {state.backup} is on the master (phase {state.phase})",
            hint=f"finish it first: appliance restore --backup {state.backup} --yes",
        )
    return state.data_dir or None


def what_happens(name: str, where: str, master: str, new_data_dir: str, encrypted: bool = False) -> list[str]:
    read = (
        "decrypt its etcd snapshot on the master with --identity (a copy in tmpfs, removed when the run "
        "ends) and read it with etcdutl"
        if encrypted
        else "read its etcd snapshot with etcdutl"
    )
    return [
        f"restore from backup {name} ({master}:{where}):",
        f"  1. check its sha256 sums, {read}",
        "  2. stop the control plane (its static pod manifests set aside): the API is down meanwhile",
        f"  3. restore the snapshot into a new etcd data dir, {new_data_dir}; the live one is kept",
        "  4. point etcd's manifest at it, start the control plane, wait for every node Ready",
        "  everything the cluster stored since that backup (objects, labels, releases) is lost",
    ]
