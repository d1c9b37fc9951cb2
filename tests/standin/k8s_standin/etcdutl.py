"""etcdutl 3.5 (offline etcd data tool): `snapshot status PATH`, `snapshot restore PATH --data-dir D
[--name N --initial-cluster C --initial-advertise-peer-urls U ...]`, `version`.

There is no etcd: a snapshot is the API server's store (etcdctl.py's `snapshot save` copies it), and
`restore` writes it as `D/member/snap/db`, where files.store_path() makes the API server read it
once the etcd manifest names D. Refusals are etcdutl 3.5's as remembered (no etcd source on these
machines to diff against): a data dir that is not empty, a missing snapshot, one that is not a
database, a --name the initial cluster lacks; exit 1 (cobrautl.ExitError) with `Error: ...`.
"""

from __future__ import annotations

import os
import shutil

from .etcdctl import ETCD_SERVER_VERSION, _log, parse_snapshot, snapshot_status
from .flags import parse_flags
from .util import Fail, hp

EXIT_ERROR, EXIT_BAD_ARGS = 1, 128
_FLAGS = {"write-out": "str", "data-dir": "str", "wal-dir": "str", "name": "str", "initial-cluster": "str",
          "initial-cluster-token": "str", "initial-advertise-peer-urls": "str", "skip-hash-check": "bool",
          "mark-compacted": "bool", "bump-revision": "str"}  # fmt: skip


def _restore(flags: dict, snap: str) -> int:
    name = flags.get("name") or "default"
    peer = flags.get("initial-advertise-peer-urls") or "http://localhost:2380"
    cluster = flags.get("initial-cluster") or f"{name}={peer}"
    members = dict(m.split("=", 1) for m in cluster.split(",") if "=" in m)
    if name not in members:
        raise Fail(
            f'Error: couldn\'t find local name "{name}" in the initial cluster configuration', EXIT_ERROR
        )
    data = flags.get("data-dir") or f"{name}.etcd"
    if os.path.exists(hp(data)) and (not os.path.isdir(hp(data)) or os.listdir(hp(data))):
        raise Fail(f'Error: data-dir "{data}" not empty or could not be read', EXIT_ERROR)
    try:
        with open(hp(snap), "rb") as f:
            raw = f.read()
    except OSError as e:
        raise Fail(f"Error: open {snap}: {(e.strerror or str(e)).lower()}", EXIT_ERROR) from e
    try:
        parse_snapshot(raw.decode())
    except (ValueError, UnicodeDecodeError) as e:
        raise Fail("Error: invalid database", EXIT_ERROR) from e
    wal = flags.get("wal-dir") or os.path.join(data, "member", "wal")
    snapdir = os.path.join(data, "member", "snap")
    _log("restoring snapshot", path=snap, **{"wal-dir": wal, "data-dir": data, "snap-dir": snapdir})
    try:
        os.makedirs(hp(snapdir), mode=0o700, exist_ok=True)
        os.makedirs(hp(wal), mode=0o700, exist_ok=True)
        os.chmod(hp(data), 0o700)
        tmp = hp(os.path.join(snapdir, "db.tmp"))
        shutil.copyfile(hp(snap), tmp)
        os.chmod(tmp, 0o600)
        os.replace(tmp, hp(os.path.join(snapdir, "db")))
    except OSError as e:
        raise Fail(f"Error: {e.strerror or e}: {e.filename}", EXIT_ERROR) from e
    _log("restored snapshot", path=snap, **{"wal-dir": wal, "data-dir": data, "snap-dir": snapdir})
    return 0


def etcdutl_main(argv: list[str]) -> int:
    """etcdutl ARGS on the host (Fail: etcdutl's message and exit code)."""
    flags, pos = parse_flags(argv, _FLAGS, {"w": "write-out"})
    if pos[:1] == ["version"]:
        print(f"etcdutl version: {ETCD_SERVER_VERSION}\nAPI version: 3.5")
        return 0
    if pos[:1] != ["snapshot"] or len(pos) < 2 or pos[1] not in ("status", "restore"):
        raise Fail(
            f"Error: standin: etcdutl {' '.join(pos)} is not supported (snapshot status|restore, version)",
            EXIT_BAD_ARGS,
        )
    if len(pos) != 3:
        raise Fail(f"Error: snapshot {pos[1]} requires exactly one argument", EXIT_BAD_ARGS)
    return snapshot_status(flags, pos[2], deprecated=False) if pos[1] == "status" else _restore(flags, pos[2])
