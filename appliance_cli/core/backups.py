"""Backups on the master, read back over SSH: what `appliance backup` wrote (its files, a Run:ai
site's backend volumes), which backups there are for `appliance restore`, whether their sums hold,
and the restore's state file. Each answer is checked before it is used; no printing."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from appliance_cli.core import opstate, restoreplan
from appliance_cli.core.paths import PATHS
from appliance_cli.core.remote import read_if_there, run_on
from appliance_cli.core.siteconfig import SiteConfig
from appliance_cli.errors import ApplianceError

# The backups' root and the restore's state file on the master (roles/appliance_paths, the source
# of the cluster_backup and etcd_restore roles' defaults).
BACKUP_ROOT = PATHS.backups
RESTORE_STATE_FILE = PATHS.restore_state
RESTORE_DATA_DIR_PREFIX = "/var/lib/etcd-restore-"

# A line of `sha256sum` output: digest, a space, ' ' or '*' (the mode), the name ('\' first when
# sha256sum escaped the name).
_SUM_LINE = re.compile(r"\\?[0-9a-f]{64} [ *](.+)")
# The same line, its digest and name apart (a name sha256sum did not escape).
_SUM_LINE_PARTS = re.compile(r"([0-9a-f]{64}) [ *]([^\\\n]+)")
# `appliance backup` writes the snapshot encrypted (age); a backup taken before that has it in clear.
ENCRYPTED_SNAPSHOT = "etcd-snapshot.db.age"
# One round trip: whether the snapshot is encrypted (the first line), then what sha256sum says.
_RESTORE_START_CHECK = (
    'cd -- "$1" || exit 0; if test -e "$2"; then echo snapshot=encrypted; else echo snapshot=clear; fi; '
    "sha256sum --strict --quiet -c SHA256SUMS 2>&1; true"
)


@dataclass(frozen=True)
class Backup:
    name: str
    where: str  # its directory on the master
    files: list[str]  # as SHA256SUMS lists them
    runai: dict[str, Any] | None  # runai-backend-volumes.json, on a Run:ai site


@dataclass(frozen=True)
class RestoreStart:
    name: str  # the backup to restore
    where: str
    unfinished: str | None  # the new data dir of a killed restore of that backup, finished by this run
    encrypted: bool  # its snapshot is etcd-snapshot.db.age: the restore needs the identity


@dataclass(frozen=True)
class Restored:
    """What the restore's state file says once it is done."""

    backup: str
    revision: Any  # etcdutl's snapshot status, as it gave them
    total_keys: Any
    nodes: list[str]
    data_dir: str
    old_data_dir: str


def read_backup(cfg: SiteConfig, name: str) -> Backup:
    where = f"{BACKUP_ROOT}/{name}"
    sums = f"{where}/SHA256SUMS"
    lines = run_on(cfg, cfg.master, ["cat", "--", sums], timeout=60).split("\n")
    files = [_summed_file(ln, sums, cfg.master.name) for ln in lines if ln.strip()]
    runai = None
    if cfg.scheduler.stack == "runai":
        path = f"{where}/runai-backend-volumes.json"
        runai = _runai_record(run_on(cfg, cfg.master, ["cat", "--", path], timeout=60), path, cfg.master.name)
    return Backup(name, where, files, runai)


def _summed_file(line: str, path: str, master: str) -> str:
    m = _SUM_LINE.fullmatch(line)
    if not m:
        raise ApplianceError(f"{path} on {master}: not a sha256sum line: {line[:80]!r}")
    return m.group(1)


def _runai_record(text: str, path: str, master: str) -> dict[str, Any]:
    """runai-backend-volumes.json: {namespace, volumes: [{claim, phase, source, capacity?}]}."""
    record = _json(text, path, master)
    if not isinstance(record, dict):
        raise ApplianceError(f"{path} on {master}: not a JSON object")
    volumes = record.get("volumes") or []
    if not isinstance(volumes, list) or not all(_is_volume(v) for v in volumes):
        raise ApplianceError(f"{path} on {master}: volumes is not a list of {{claim, phase, source}}")
    return record


def _is_volume(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(v.get(k), str) for k in ("claim", "phase", "source"))


def start_restore(cfg: SiteConfig, wanted: str, identity: bool) -> RestoreStart:
    """The backup `wanted` names (a name or latest), its sums checked; an encrypted one refused
    without an identity (`identity`: the operator gave one), an unfinished restore of another
    backup refused. Reads only: nothing on the master changes."""
    master = cfg.master.name
    listing = run_on(
        cfg, cfg.master, ["sh", "-c", 'ls -1 -- "$1" 2>/dev/null || true', "sh", BACKUP_ROOT], timeout=60
    ).split()
    name = restoreplan.pick_backup(listing, wanted, BACKUP_ROOT, master)
    where = f"{BACKUP_ROOT}/{name}"
    check = ["sh", "-c", _RESTORE_START_CHECK, "sh", where, ENCRYPTED_SNAPSHOT]
    first, _, sums = run_on(cfg, cfg.master, check).partition("\n")
    bad = restoreplan.failed_sums(sums)
    if bad or "No such file" in sums or not first.startswith("snapshot="):
        raise ApplianceError(
            f"backup {name}: sha256 mismatch in {', '.join(bad) or 'SHA256SUMS (missing)'} (SHA256SUMS on "
            f"{master}); nothing was changed",
            hint="the backup is damaged: restore another one (--backup NAME), or copy this one back from where "
            "it was copied off",
        )
    encrypted = first == "snapshot=encrypted"
    if encrypted and not identity:
        raise ApplianceError(
            f"backup {name}: its snapshot is encrypted ({ENCRYPTED_SNAPSHOT}) and no identity was given; "
            "nothing was changed",
            hint="appliance restore --identity FILE: the age identity file whose public key is the site's "
            "backup.recipient (kept off the appliance)",
        )
    unfinished = restoreplan.unfinished(restore_state(cfg), name)  # a killed run's: finished, not redone
    return RestoreStart(name, where, unfinished, encrypted)


def restore_state(cfg: SiteConfig) -> opstate.EtcdRestore:
    """The restore's state on the master (empty when there is none; StateFileError when unusable)."""
    text = run_on(cfg, cfg.master, read_if_there(RESTORE_STATE_FILE), timeout=60)
    return opstate.parse_restore(text, RESTORE_STATE_FILE, cfg.master.name).etcd_restore


def restored(cfg: SiteConfig) -> Restored:
    state = restore_state(cfg)
    return Restored(
        state.backup,
        state.snapshot.get("revision"),
        state.snapshot.get("totalKey"),
        list(state.nodes),
        state.data_dir,
        state.old_data_dir,
    )


def _json(text: str, path: str, master: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise ApplianceError(f"{path} on {master}: no JSON in it") from None


# What a backup that can rebuild a master holds, encrypted (cluster_backup): the snapshot and the
# secrets archive (the PKI and /etc/appliance).
SECRETS_ARCHIVE = "secrets.tar.age"


@dataclass(frozen=True)
class CopiedBackup:
    name: str  # its directory's name, as `appliance backup` named it
    path: str  # where the operator keeps it (the controller)
    files: list[str]  # as SHA256SUMS lists them, each checked


def check_copied_backup(path: str) -> CopiedBackup:
    """A backup directory copied off the master (`appliance rebuild-master --from`): its name a
    backup's, its SHA256SUMS there and every sum holding, the encrypted snapshot and secrets in it.
    Reads only; ApplianceError naming the file otherwise."""
    root = os.path.abspath(path)
    name = os.path.basename(root)
    hint = "pass the directory `appliance backup` wrote, as copied off the master (scp -r), unchanged"
    if not os.path.isdir(root):
        raise ApplianceError(f"--from {path}: not a directory", hint=hint)
    if not restoreplan.BACKUP_NAME.fullmatch(name):
        raise ApplianceError(f"--from {path}: '{name}' is not a backup's name (YYYYMMDDTHHMMSSZ)", hint=hint)
    sums_path = os.path.join(root, "SHA256SUMS")
    try:
        with open(sums_path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ApplianceError(f"{sums_path}: cannot be read ({exc.__class__.__name__})", hint=hint) from None
    files: list[str] = []
    for line in lines:
        m = _SUM_LINE_PARTS.fullmatch(line)
        if m is None or "/" in m.group(2) or m.group(2).startswith("."):
            raise ApplianceError(f"{sums_path}: not a line sha256sum writes: {line[:80]!r}", hint=hint)
        digest, fname = m.group(1), m.group(2)
        try:
            with open(os.path.join(root, fname), "rb") as f:
                actual = hashlib.file_digest(f, "sha256").hexdigest()
        except OSError:
            raise ApplianceError(
                f"backup {name}: {fname} is listed in SHA256SUMS but missing", hint=hint
            ) from None
        if actual != digest:
            raise ApplianceError(
                f"backup {name}: sha256 mismatch in {fname} ({root}); nothing was changed",
                hint="the copy is damaged: copy the backup off again, or use another one",
            )
        files.append(fname)
    for needed in (ENCRYPTED_SNAPSHOT, SECRETS_ARCHIVE):
        if needed not in files:
            raise ApplianceError(
                f"backup {name}: no {needed} in it: it cannot rebuild a master",
                hint="a backup taken before backups held the PKI and secrets cannot; use a newer one",
            )
    return CopiedBackup(name, root, files)


# Whether the master runs a cluster ($1, kubeadm's admin.conf) and, when it does, the restore
# state ($2, nothing when absent): one round trip. The paths are arguments, never shell text.
_HAS_CLUSTER = 'if test -e "$1"; then echo yes; cat -- "$2" 2>/dev/null || true; else echo no; fi'


def refuse_live_master(cfg: SiteConfig, backup: str) -> bool:
    """`appliance rebuild-master` runs on a fresh master, or finishes its own unfinished rebuild
    from the same backup (the restore state's rebuild_master: secrets put back, not yet restored).
    A master with kubeadm's admin.conf otherwise runs a cluster and is refused (the restore of a
    running cluster is `appliance restore`). -> whether this run finishes an unfinished rebuild."""
    master = cfg.master.name
    argv = ["sh", "-c", _HAS_CLUSTER, "sh", PATHS.admin_conf, RESTORE_STATE_FILE]
    answer, _, text = run_on(cfg, cfg.master, argv, timeout=60).partition("\n")
    if answer.strip() == "no":
        return False
    rebuild = opstate.parse_restore(text, RESTORE_STATE_FILE, master).rebuild_master
    if rebuild.backup == backup and rebuild.phase == "secrets":
        return True
    done = rebuild.backup == backup and rebuild.phase == "done"
    raise ApplianceError(
        f"{master} already has a control plane ({PATHS.admin_conf})"
        + (f", rebuilt from backup {backup} and restored" if done else "")
        + ": a master is rebuilt only on a fresh machine; nothing was changed",
        hint="that rebuild restored it: if the install that ends a rebuild did not finish, run `appliance install`"
        if done
        else f"to put this cluster back as backup {backup} has it, copy the backup to "
        f"{master}:{BACKUP_ROOT}/ and run `appliance restore --backup {backup} --identity FILE`",
    )
