"""etcdctl 3.5 inside the etcd static pod (`crictl exec <etcd> etcdctl ...`): snapshot save|status.

There is no etcd: the API server's store (files.store_path(): member/snap/db under the data dir
the etcd manifest names, what etcd would hold) is the database. `snapshot save` copies it as one consistent file (the API server replaces it by an atomic
rename, util.write_file, so one read sees one whole state), the way etcdctl writes PATH.part and
renames it; `snapshot status` reads such a file. The paths are the etcd container's hostPath mounts
(/etc/kubernetes/pki/etcd, /var/lib/etcd), the same on the host.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import zlib

from .files import store_path
from .flags import parse_flags
from .util import Fail, hp, read_text

ETCD_SERVER_VERSION = "3.5.6"
_FLAGS = {"endpoints": "str", "cacert": "str", "cert": "str", "key": "str", "write-out": "str",
          "dial-timeout": "str", "command-timeout": "str", "insecure-skip-tls-verify": "bool",
          "insecure-transport": "bool", "user": "str", "password": "str", "debug": "bool", "hex": "bool",
          "keepalive-time": "str", "keepalive-timeout": "str", "discovery-srv": "str"}  # fmt: skip
EXIT_ERROR, EXIT_INTERRUPTED, EXIT_BAD_ARGS = 1, 5, 128  # cobrautl's codes


def _log(msg: str, **fields: str) -> None:
    """etcdctl's zap logger (JSON lines on stderr)."""
    ts = dt.datetime.now().astimezone().isoformat(timespec="microseconds")
    sys.stderr.write(
        json.dumps({"level": "info", "ts": ts, "msg": msg, **fields}, separators=(",", ":")) + "\n"
    )


def _tls_files(flags: dict) -> None:
    """transport.TLSInfo.ClientConfig: the client cert and key, then the CA, read or fail."""
    if bool(flags.get("cert")) != bool(flags.get("key")):
        key, cert = flags.get("key", ""), flags.get("cert", "")
        raise Fail(
            f"Error: KeyFile and CertFile must both be present[key: {key}, cert: {cert}]", EXIT_BAD_ARGS
        )
    for k in ("cert", "key", "cacert"):
        if flags.get(k) and not os.path.isfile(hp(flags[k])):
            raise Fail(f"Error: open {flags[k]}: no such file or directory", EXIT_BAD_ARGS)


def _save(flags: dict, path: str) -> int:
    _tls_files(flags)
    part = f"{path}.part"
    endpoint = (flags.get("endpoints") or "127.0.0.1:2379").split(",")[0]
    try:
        with open(store_path(), "rb") as f:  # one read: one whole state
            data = f.read()
    except OSError as e:
        raise Fail(f"Error: context deadline exceeded (standin: {e.strerror})", EXIT_INTERRUPTED) from e
    try:
        fd = os.open(hp(part), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as e:
        raise Fail(
            f"Error: could not open {part} ({(e.strerror or str(e)).lower()})", EXIT_INTERRUPTED
        ) from e
    _log("created temporary db file", path=part)
    with os.fdopen(fd, "wb") as f:
        _log("fetching snapshot", endpoint=endpoint)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    _log("fetched snapshot", endpoint=endpoint, size=f"{len(data) / 1e6:.1f} MB", took="now")
    os.replace(hp(part), hp(path))
    _log("saved", path=path)
    print(f"Snapshot saved at {path}")
    return 0


def snapshot_status(flags: dict, path: str, deprecated: bool = True) -> int:
    """`snapshot status PATH` (etcdctl's, deprecated there, or etcdutl's)."""
    if deprecated:
        sys.stderr.write("Deprecated: Use `etcdutl snapshot status` instead.\n\n")
    text = read_text(hp(path))
    if text is None:
        raise Fail(f"Error: stat {path}: no such file or directory", EXIT_ERROR)
    try:
        doc = parse_snapshot(text)
        st = {"hash": zlib.crc32(text.encode()), "revision": int(doc["resourceVersion"]),
              "totalKey": len(doc["objects"]), "totalSize": os.path.getsize(hp(path))}  # fmt: skip
    except ValueError as e:
        raise Fail("Error: invalid database", EXIT_ERROR) from e
    fmt = flags.get("write-out") or "simple"
    if fmt == "json":
        print(json.dumps(st, separators=(",", ":")))
    elif fmt == "simple":
        print(f"{st['hash']:x}, {st['revision']}, {st['totalKey']}, {st['totalSize'] / 1e6:.1f} MB")
    else:
        raise Fail(f'Error: unsupported output format "{fmt}" (standin: json and simple only)', EXIT_BAD_ARGS)
    return 0


def parse_snapshot(text: str) -> dict:
    """The store a snapshot holds (ValueError: not one; bbolt's "invalid database")."""
    try:
        doc = json.loads(text)
        int(doc["resourceVersion"])
        if not isinstance(doc["objects"], dict):
            raise TypeError("objects")
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(str(e)) from e
    return doc


def etcdctl_main(argv: list[str]) -> int:
    """etcdctl ARGS as run in the etcd container; (Fail: etcdctl's message and exit code)."""
    flags, pos = parse_flags(argv, _FLAGS, {"w": "write-out"})
    if pos[:1] == ["version"]:
        print(f"etcdctl version: {ETCD_SERVER_VERSION}\nAPI version: 3.5")
        return 0
    if pos[:1] != ["snapshot"] or len(pos) < 2 or pos[1] not in ("save", "status"):
        raise Fail(
            f"Error: standin: etcdctl {' '.join(pos)} is not supported (snapshot save|status, version)"
        )
    if len(pos) != 3:
        raise Fail(f"Error: snapshot {pos[1]} expects one argument", EXIT_BAD_ARGS)
    return _save(flags, pos[2]) if pos[1] == "save" else snapshot_status(flags, pos[2])
