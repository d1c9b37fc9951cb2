#!/usr/bin/python3
"""Copy the offline bundle (USB stick) to the master: verified, atomic, resumable.

Stdlib only, Python >= 3.8. `sync()` is the core (used by the tests); `main()` the module."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

from ansible.module_utils.bundle_manifest import free_bytes, mib, open_regular, sha256_of
from ansible.module_utils.bundle_manifest import hex_of as _hex_of
from ansible.module_utils.bundle_manifest import read_manifest as _read_manifest
from ansible.module_utils.node_files import write_atomically

DOCUMENTATION = r"""
module: bundle_sync
short_description: Copy an appliance bundle to the master, verifying every blob
description:
  - Reads C(manifest.json) on the source and copies every blob it lists (whole files and
    chunks) to C(<dest>/blobs/sha256/<hex>), plus C(manifest.sig), C(oci-layout) and
    C(index.json) when present, and C(manifest.json) last.
  - Each blob is staged in C(<dest>/.staging/), hashed while it is copied, fsynced and
    renamed into place only when its sha256 matches; a half-written blob is never left under
    C(blobs/). Blobs already present with the right size are skipped (resumable, idempotent),
    once their bytes are known good: each blob this module wrote or hashed is recorded in
    C(<dest>/.verified) with its size, mtime and inode, and a present blob whose record does not
    match (changed since, or copied by an older tool) is hashed again; one of the right size but
    other bytes fails the run, naming the blob and the file.
  - Refuses to start when the destination has less free space than the copy needs.
  - Corrupt or missing source blobs are all named (with the artifacts using them) and the
    destination manifest is not written, so an incomplete copy is never taken for a bundle.
  - This is where the stick's blobs are hashed: the controller's install gate checks the
    signature, the manifest and the blobs' sizes only, so each byte is read from the stick once.
  - Every file is read from the stick once, never through a symlink (O_NOFOLLOW; a bundle holds
    none) and only if it is a regular file, and the bytes that were checked are the bytes
    installed: blobs are hashed while staged, root files checked in memory, then renamed in.
    Each root file is checked before anything is copied - C(manifest.json) is the one the
    controller verified (C(expect_manifest_sha256)); C(index.json) and C(install-toolkit.sh)
    match the digests it records (and are refused when it records none); C(oci-layout) is the
    fixed OCI marker; C(manifest.sig) names this manifest's digest (the signature itself is
    checked by the controller's gate and by C(appliance bundle verify), not here: no key).
  - A bad stick fails with C(appliance_failure=bundle), which the CLI reports as a bundle error;
    a blob of the copy that changed after it was verified with C(appliance_failure=bundle-copy).
options:
  src:
    description: The bundle as delivered (e.g. the mounted USB stick).
    type: path
    required: true
  dest:
    description: The bundle copy on the master.
    type: path
    required: true
  fsync:
    description: fsync each blob before renaming it into place.
    type: bool
    default: true
  prune:
    description: Remove blobs under dest that the new manifest no longer lists.
    type: bool
    default: false
  expect_manifest_sha256:
    description:
      - sha256 (hex) of the manifest.json the controller verified (signature and blobs).
        When set, a source whose manifest differs (another stick, a tampered copy) is
        refused before anything is copied.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Bundle repo | Copy the bundle from the USB stick
  bundle_sync:
    src: /media/appliance-usb/bundle
    dest: /srv/appliance/bundle
"""

RETURN = r"""
copied:
  description: Blobs copied.
  type: int
  returned: always
skipped:
  description: Blobs already present.
  type: int
  returned: always
bytes_copied:
  description: Bytes of blob data copied.
  type: int
  returned: always
pruned:
  description: Stale blobs removed (prune=true).
  type: int
  returned: always
"""

BUF = 4 * 1024 * 1024
COPY_WORKERS = max(2, min(4, os.cpu_count() or 1))
MANIFEST = "manifest.json"
META_FILES = ("manifest.sig", "oci-layout", "index.json", "install-toolkit.sh")  # copied before manifest.json
OCI_LAYOUT_BYTES = b'{"imageLayoutVersion":"1.0.0"}'  # what `appliance bundle build` writes, exactly
SMALL_ROOT_FILE = 64 * 1024  # manifest.sig, oci-layout: a few hundred bytes when genuine
STAGING = ".staging"
VERIFIED = ".verified"  # hex -> [size, mtime_ns, inode] of the blobs whose bytes were hashed here
BLOB_DIR = os.path.join("blobs", "sha256")
_HEX_RE = re.compile(r"[0-9a-f]{64}")


class SyncError(Exception):
    """A one-line, user-facing failure."""


class BadBundle(SyncError):
    """The stick's bytes differ from the signed manifest (reported as appliance_failure: bundle)."""


class BadCopy(SyncError):
    """A blob of the master's copy changed after it was verified (appliance_failure: bundle-copy)."""


def hex_of(digest: str) -> str:
    return _hex_of(digest, SyncError)


def read_manifest(src: str) -> tuple[dict[str, Any], bytes]:
    return _read_manifest(
        src,
        SyncError,
        "{path}: no manifest.json, not a bundle (is the USB stick mounted?)",
        require_schema=True,
        refuse_links=BadBundle,
    )


def blob_owners(manifest: dict[str, Any]) -> dict[str, tuple[int, list[str]]]:
    """hex digest -> (size, labels of the artifacts using it); chunks are their own blobs."""
    owners: dict[str, tuple[int, list[str]]] = {}
    for art in manifest.get("artifacts", []):
        label = "{}/{}".format(art.get("kind"), art.get("name"))
        for f in art.get("files", []):
            parts = f.get("chunks") or [{"digest": f.get("digest"), "size": f.get("size")}]
            for c in parts:
                entry = owners.setdefault(hex_of(c["digest"]), (int(c["size"]), []))
                if label not in entry[1]:
                    entry[1].append(label)
    return owners


def root_file_digests(manifest: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """Root files the signed manifest records (digest, size) for: the OCI index, install-toolkit.sh."""
    out = {}
    index = manifest.get("oci_index") or {}
    if index.get("digest"):
        out["index.json"] = (index["digest"], int(index.get("size") or 0))
    script = manifest.get("install_script") or {}
    if script.get("digest"):
        out[script.get("path", "install-toolkit.sh")] = (script["digest"], int(script.get("size") or 0))
    return out


def read_root_file(src: str, name: str, limit: int) -> bytes | None:
    """The bytes of root file `name` on the stick (None when absent), read once, never through a
    symlink; more than `limit` bytes is refused (these are read whole, into memory)."""
    path = os.path.join(src, name)
    try:
        with open_regular(path, BadBundle) as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SyncError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise BadBundle(f"{path} is larger than a genuine one ({limit} bytes at most), bundle not copied")
    return data


def root_file_problem(name: str, data: bytes, manifest: dict[str, Any], raw: bytes) -> str | None:
    """Why root file `name` (these bytes) is not the signed bundle's, or None. manifest.json is
    `raw` itself, checked against the controller's digest by sync()."""
    recorded = root_file_digests(manifest)
    if name in recorded:
        if "sha256:" + hashlib.sha256(data).hexdigest() != recorded[name][0]:
            return "does not match the digest the manifest records (tampered)"
        return None
    if name == "oci-layout":  # no digest in the manifest: its content is fixed
        return None if data.strip() == OCI_LAYOUT_BYTES else "is not the OCI layout marker (tampered)"
    if name == "manifest.sig":
        # Not covered by the manifest (it signs it) and not verifiable here (no key on the master):
        # it must at least be a signature of this manifest; its Ed25519 check is the gate's.
        try:
            sig = json.loads(data.decode("utf-8"))
        except ValueError:
            sig = None
        want = "sha256:" + hashlib.sha256(raw).hexdigest()
        if not isinstance(sig, dict) or sig.get("manifest_digest") != want:
            return "is not a signature of this manifest.json (tampered, or from another bundle)"
        return None
    return "is on the stick but the manifest records no digest for it"


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def _has_bytes(path: str, data: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(data) + 1) == data
    except FileNotFoundError:
        return False


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_source(path: str) -> tuple[BinaryIO | None, str | None]:
    """(the open file, None), or (None, why it is not read): absent, a symlink, not a file."""
    try:
        return open_regular(path, BadBundle), None
    except FileNotFoundError:
        return None, "missing on the source"
    except BadBundle as exc:  # "<path> is a symlink, refused …"
        return None, str(exc)


def _create(path: str) -> BinaryIO:
    """A new file of ours in .staging: never an existing file, never through a link."""
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "wb")


def copy_verified(src: str, staged: str, dest: str, hexd: str, size: int, fsync: bool) -> str | None:
    """Copy src to staged while hashing; rename to dest when it matches. Returns the problem
    (str) when it does not, leaving nothing behind. The staged bytes are the hashed bytes: the
    source is read once, so a change to it after (or during) the copy cannot reach dest."""
    h = hashlib.sha256()
    n = 0
    fin, problem = _open_source(src)
    if fin is None:
        return problem
    try:
        with fin, _create(staged) as out:
            while True:
                buf = fin.read(BUF)
                if not buf:
                    break
                n += len(buf)
                if n > size:
                    break
                h.update(buf)
                out.write(buf)
            out.flush()
            if n == size and h.hexdigest() == hexd and fsync:
                os.fsync(out.fileno())
        if n != size:
            return f"size differs from the manifest ({size} bytes expected)"
        if h.hexdigest() != hexd:
            return f"content does not match its digest (corrupt): it hashes to sha256:{h.hexdigest()}"
        os.chmod(staged, 0o644)
        os.replace(staged, dest)
        return None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise SyncError(f"no space left on device while writing {dest}") from None
        raise SyncError(f"cannot copy {src} to {dest}: {exc.strerror or exc}") from None
    finally:
        if os.path.lexists(staged):
            os.unlink(staged)


def _stamp(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def read_verified(dest: str) -> dict[str, list[int]]:
    try:
        with open(os.path.join(dest, VERIFIED)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: every present blob is hashed once more
    return data if isinstance(data, dict) else {}


def write_verified(dest: str, hexes: list[str]) -> None:
    """Record the stamps of blobs just hashed, atomically (a torn record only costs a re-hash)."""
    blob_dir = os.path.join(dest, BLOB_DIR)
    stamps = {h: s for h in sorted(hexes) if (s := _stamp(os.path.join(blob_dir, h))) is not None}
    write_atomically(os.path.join(dest, VERIFIED), json.dumps(stamps, separators=(",", ":")).encode(), 0o644)


def check_present(dest: str, owners: dict[str, tuple[int, list[str]]], present: list[str]) -> None:
    """Hash the present blobs no record vouches for; a mismatch is the master's copy gone bad
    (same size, other bytes), which the size check alone would take for good."""
    blob_dir = os.path.join(dest, BLOB_DIR)
    with ThreadPoolExecutor(max_workers=COPY_WORKERS) as pool:
        digests = list(pool.map(lambda h: hex_of(sha256_of(os.path.join(blob_dir, h))), present))
    bad = [(h, got) for h, got in zip(present, digests) if got != h]  # noqa: B905 (Python 3.8)
    if bad:
        h, got = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise BadCopy(
            f"{os.path.join(blob_dir, h)}: blob sha256:{h} ({', '.join(owners[h][1])}) on the master has the "
            f"manifest's size but other bytes (it hashes to sha256:{got}){more}: remove it and run the "
            "install again, which copies it again from the stick"
        )


def plan(src: str, dest: str) -> dict[str, Any]:
    manifest, raw = read_manifest(src)
    owners = blob_owners(manifest)
    missing = {
        h: v for h, v in owners.items() if _size(os.path.join(dest, BLOB_DIR, h)) != v[0]
    }  # absent, or short from an interrupted copy of an older tool
    verified = read_verified(dest)
    unvouched = sorted(
        h for h in owners if h not in missing and verified.get(h) != _stamp(os.path.join(dest, BLOB_DIR, h))
    )
    recorded = root_file_digests(manifest)
    meta: dict[str, bytes] = {}  # what is installed is what was read here and checked, never re-read
    for name in META_FILES:
        limit = max(recorded[name][1] if name in recorded else 0, SMALL_ROOT_FILE)
        data = read_root_file(src, name, limit)
        if data is not None:
            meta[name] = data
    meta[MANIFEST] = raw  # last: the copy is complete once it is there
    meta_changed = [m for m, data in meta.items() if not _has_bytes(os.path.join(dest, m), data)]
    need = sum(v[0] for v in missing.values()) + sum(len(meta[m]) for m in meta_changed)
    return {
        "manifest": manifest,
        "raw": raw,
        "owners": owners,
        "missing": missing,
        "unvouched": unvouched,
        "meta": meta,
        "meta_changed": meta_changed,
        "need": need,
    }


def sync(
    src: str,
    dest: str,
    fsync: bool = True,
    prune: bool = False,
    check_mode: bool = False,
    expect_manifest_sha256: str = "",
) -> dict[str, Any]:
    p = plan(src, dest)
    if expect_manifest_sha256:
        got = hashlib.sha256(p["raw"]).hexdigest()
        if got != expect_manifest_sha256.lower():
            raise SyncError(
                f"{os.path.join(src, MANIFEST)} is not the bundle the controller verified "
                f"(manifest sha256 {got[:12]}…, verified {expect_manifest_sha256[:12]}…): "
                "verify the bundle on this stick, then install again"
            )
    missing, owners = p["missing"], p["owners"]
    for name, data in p["meta"].items():  # before anything is copied
        problem = root_file_problem(name, data, p["manifest"], p["raw"]) if name != MANIFEST else None
        if problem:
            raise BadBundle(
                f"{os.path.join(src, name)} {problem}, bundle not copied -- fix the bundle "
                "(appliance bundle verify) and re-run"
            )
    check_present(dest, owners, p["unvouched"])
    if p["need"]:
        have = free_bytes(dest)
        if have < p["need"]:
            raise SyncError(
                f"not enough free space on {dest}: the bundle needs {mib(p['need'])} more, {mib(have)} free; "
                "nothing was copied (free space there, or give bundle.path in appliance.yml a larger filesystem)"
            )
    blob_dir = os.path.join(dest, BLOB_DIR)
    stale = []
    if prune and os.path.isdir(blob_dir):
        stale = sorted(n for n in os.listdir(blob_dir) if _HEX_RE.fullmatch(n) and n not in owners)
    result = {
        "changed": bool(missing or p["meta_changed"] or stale),
        "copied": len(missing),
        "skipped": len(owners) - len(missing),
        "bytes_copied": sum(v[0] for v in missing.values()),
        "pruned": len(stale),
        "artifacts": len(p["manifest"].get("artifacts", [])),
    }
    if check_mode:
        return result
    staging = os.path.join(dest, STAGING)
    for d in (dest, blob_dir, staging):
        os.makedirs(d, mode=0o755, exist_ok=True)
    for name in os.listdir(staging):  # leftovers of an interrupted run: ours, never finished
        os.unlink(os.path.join(staging, name))
    bad = []

    def one(hexd: str) -> str | None:
        return copy_verified(
            os.path.join(src, BLOB_DIR, hexd),
            os.path.join(staging, f"{hexd}.{os.getpid()}"),
            os.path.join(blob_dir, hexd),
            hexd,
            missing[hexd][0],
            fsync,
        )

    # Several blobs at once: one blob's hashing (hashlib drops the GIL) overlaps another's reads
    # and writes, so verifying costs little more than copying. Biggest first keeps both busy.
    order = sorted(missing, key=lambda h: (-missing[h][0], h))
    with ThreadPoolExecutor(max_workers=COPY_WORKERS) as pool:
        for hexd, problem in zip(order, pool.map(one, order)):  # noqa: B905 (Python 3.8 on the nodes)
            if problem:
                bad.append(f"sha256:{hexd} ({', '.join(missing[hexd][1])}): {problem}")
    bad.sort()
    if bad:
        raise BadBundle(
            f"{len(bad)} bad blob(s) in {src}, bundle not copied: " + "; ".join(bad)
            + " -- fix the bundle (appliance bundle verify) and re-run; finished blobs are kept"
        )  # fmt: skip
    if fsync and missing:
        _fsync_dir(blob_dir)
    for name in p["meta_changed"]:  # manifest.json is last in the list: the copy is complete
        staged = os.path.join(staging, name)
        with _create(staged) as out:
            out.write(p["meta"][name])  # the bytes checked above, not the stick's file read again
            out.flush()
            if fsync:
                os.fsync(out.fileno())
        os.chmod(staged, 0o644)
        os.replace(staged, os.path.join(dest, name))
    if fsync and p["meta_changed"]:
        _fsync_dir(dest)
    for name in stale:
        os.unlink(os.path.join(blob_dir, name))
    if missing or p["unvouched"] or stale or not os.path.isfile(os.path.join(dest, VERIFIED)):
        write_verified(dest, list(owners))
    return result


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "fsync": {"type": "bool", "default": True},
            "prune": {"type": "bool", "default": False},
            "expect_manifest_sha256": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = sync(
            p["src"], p["dest"], p["fsync"], p["prune"], module.check_mode, p["expect_manifest_sha256"]
        )
    except BadBundle as exc:
        module.fail_json(msg=str(exc), appliance_failure="bundle")
    except BadCopy as exc:
        module.fail_json(msg=str(exc), appliance_failure="bundle-copy")
    except SyncError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
