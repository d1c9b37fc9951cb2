#!/usr/bin/python3
"""Materialise the tree the master serves over HTTP from the bundle copy's blobs.

Stdlib only, Python >= 3.8. `plan_view()`/`materialise()` are the core (used by the tests)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from typing import Any, BinaryIO

from ansible.module_utils.bundle_manifest import hex_of as _hex_of
from ansible.module_utils.bundle_manifest import read_manifest as _read_manifest
from ansible.module_utils.node_files import write_atomically

DOCUMENTATION = r"""
module: bundle_view
short_description: Build the master's served tree (apt repos, files, charts) from bundle blobs
description:
  - "Maps the bundle's artifacts to paths under C(www): C(apt/<name>/<path>) for apt-repo
    artifacts (flat repositories), C(files/<name>) for single-file C(file) artifacts
    (C(files/<name>/<path>) when an artifact has several files) and C(charts/<name>/<path>)
    for helm charts. OCI images are served by the registry, wheels are not served."
  - Entries are hard links to the blobs (a copy when across filesystems, or for chunked
    files, joined and checked against their sha256), renamed into place atomically.
  - The module records what it owns in C(<www>/.bundle-view.json) and removes entries a
    previous run made that the current manifest no longer lists; other files are left alone.
options:
  bundle_path:
    description: The bundle copy on the master.
    type: path
    required: true
  www:
    description: Root of the served tree.
    type: path
    required: true
  link_mode:
    description: C(auto) hard-links (copy across filesystems), C(copy) always copies.
    type: str
    choices: [auto, copy]
    default: auto
  base_url:
    description: URL the tree is served at; prefixes the URLs in the returned index.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Bundle repo | Build the served tree
  bundle_view:
    bundle_path: /srv/appliance/bundle
    www: /srv/appliance/www
"""

RETURN = r"""
entries:
  description: Number of served entries.
  type: int
  returned: always
written:
  description: Entries (re)linked or copied.
  type: int
  returned: always
removed:
  description: Stale entries removed.
  type: list
  returned: always
apt_repos:
  description: apt-repo artifacts (name, distro, codename, arch, url, signed_by, keyring).
  type: list
  returned: always
files:
  description: >-
    File artifacts: name -> {sha256, url, version, size, install_path, mode, source_url, paths};
    C(paths) maps each file of a several-file artifact (served at C(url)<path>) to its sha256.
  type: dict
  returned: always
charts:
  description: "Helm charts: name -> {sha256, url, version, size, images}."
  type: dict
  returned: always
"""

BUF = 4 * 1024 * 1024
STATE = ".bundle-view.json"


class ViewError(Exception):
    """A one-line, user-facing failure."""


def hex_of(digest: str) -> str:
    return _hex_of(digest, ViewError)


def _safe_rel(path: str) -> str:
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in path:
        raise ViewError(f"unsafe path {path!r} in the manifest")
    return path


def plan_view(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Served path (relative to www) -> {digest, size, parts: [(blob digest, size)], artifact}."""
    out: dict[str, dict[str, Any]] = {}
    for art in manifest.get("artifacts", []):
        kind, name = art.get("kind"), _safe_rel(str(art.get("name")))
        if "/" in name:
            raise ViewError(f"artifact name {name!r} contains '/'")
        files = art.get("files", [])
        for f in files:
            rel = _safe_rel(f["path"])
            if kind == "apt-repo":
                served = f"apt/{name}/{rel}"
            elif kind == "file":
                served = f"files/{name}" if len(files) == 1 else f"files/{name}/{rel}"
            elif kind == "helm-chart":
                served = f"charts/{name}/{rel}"
            else:
                continue  # oci-image: the registry; wheel: the toolkit's own install
            parts = f.get("chunks") or [{"digest": f["digest"], "size": f["size"]}]
            if served in out:
                raise ViewError(f"{kind}/{name}: {served} is listed twice")
            out[served] = {
                "digest": f["digest"],
                "size": int(f["size"]),
                "parts": [(c["digest"], int(c["size"])) for c in parts],
                "artifact": f"{kind}/{name}",
            }
    return out


def served_index(manifest: dict[str, Any], base_url: str) -> dict[str, Any]:
    """What the other roles need: apt repositories (by distro/codename), single files and
    charts with their sha256 and served URL (base_url + served path)."""
    base = base_url.rstrip("/")
    apt, files, charts = [], {}, {}
    for art in manifest.get("artifacts", []):
        kind, name = art.get("kind"), str(art.get("name"))
        info = art.get("apt") or {}
        entries = art.get("files", [])
        if kind == "apt-repo":
            apt.append(
                {
                    "name": name,
                    "distro": str(info.get("distro", "")).lower(),
                    "codename": str(info.get("codename", "")).lower(),
                    "arch": info.get("arch", "amd64"),
                    "url": f"{base}/apt/{name}/",
                    # the key its InRelease is signed with, from the signed manifest (never :8081)
                    "signed_by": str(info.get("signed_by") or ""),
                    "keyring": str(info.get("keyring") or ""),
                }
            )
        elif kind in ("file", "helm-chart") and entries:
            f = entries[0]
            if kind == "file":
                path = f"files/{name}" if len(entries) == 1 else f"files/{name}/"
            else:
                path = f"charts/{name}/{f['path']}" if len(entries) == 1 else f"charts/{name}/"
            entry = {
                "sha256": hex_of(f["digest"]) if len(entries) == 1 else "",
                "url": f"{base}/{path}",
                "version": art.get("version") or "",
                "size": int(art.get("size", 0)),
            }
            if kind == "file":
                if len(entries) > 1:  # a tree (a vendor's files): each member's path -> sha256
                    entry["members"] = {e["path"]: hex_of(e["digest"]) for e in entries}
                entry["install_path"] = art.get("install_path") or ""
                entry["mode"] = f.get("mode") or ""
                entry["source_url"] = (art.get("source") or {}).get("url") or ""
                # the release a kube tool is bundled for ("" = its own version; lab kubectl: 1.23)
                entry["kubernetes"] = art.get("kubernetes") or ""
                files[name] = entry
            else:
                entry["images"] = art.get("images") or []
                charts[name] = entry
    return {"apt_repos": apt, "files": files, "charts": charts}


def read_state(www: str) -> dict[str, str]:
    try:
        with open(os.path.join(www, STATE), "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
        return {str(k): str(v) for k, v in data.get("entries", {}).items()}
    except (FileNotFoundError, ValueError, AttributeError):
        return {}


def _write_state(www: str, entries: dict[str, str]) -> None:
    text = json.dumps({"entries": entries}, indent=1, sort_keys=True) + "\n"
    write_atomically(os.path.join(www, STATE), text.encode("utf-8"), 0o644)


def _up_to_date(path: str, entry: dict[str, Any], recorded: str | None, blob: str | None = None) -> bool:
    """`blob`: the entry's one blob when it is hard-linked (link_mode auto). A served link that is
    no longer the blob's inode (the blob was removed and copied again, e.g. after it was found
    corrupt) still serves the old bytes: it is linked again."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    if blob is not None:
        try:
            bst = os.stat(blob)
        except FileNotFoundError:
            bst = None  # Sync names a missing blob; what is served stays until then
        if bst is not None and bst.st_dev == st.st_dev and bst.st_ino != st.st_ino:
            return False
    return recorded == entry["digest"] and st.st_size == entry["size"]


def _linked_blob(bundle: str, entry: dict[str, Any], link_mode: str) -> str | None:
    if link_mode != "auto" or len(entry["parts"]) != 1:
        return None
    return os.path.join(bundle, "blobs", "sha256", hex_of(entry["parts"][0][0]))


def _open_blob(bundle: str, digest: str, label: str) -> BinaryIO:
    try:
        return open(os.path.join(bundle, "blobs", "sha256", hex_of(digest)), "rb")
    except FileNotFoundError:
        raise ViewError(f"{label}: bundle blob {digest} is missing") from None


def _materialise_one(bundle: str, dest: str, entry: dict[str, Any], link_mode: str) -> str:
    os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
    tmp = os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.view-{os.getpid()}")
    blob = os.path.join(bundle, "blobs", "sha256", hex_of(entry["parts"][0][0]))
    how = "copied"
    try:
        if link_mode == "auto" and len(entry["parts"]) == 1:
            try:
                os.link(blob, tmp)
                how = "linked"
            except FileNotFoundError:
                raise ViewError(f"{entry['artifact']}: bundle blob {entry['digest']} is missing") from None
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                    raise
        if how == "copied":
            h = hashlib.sha256()
            with open(tmp, "wb") as out:
                for d, _ in entry["parts"]:
                    with _open_blob(bundle, d, entry["artifact"]) as fin:
                        for buf in iter(lambda f=fin: f.read(BUF), b""):
                            h.update(buf)
                            out.write(buf)
            if "sha256:" + h.hexdigest() != entry["digest"]:
                raise ViewError(f"{entry['artifact']}: bundle blob(s) of {entry['digest']} are corrupt")
            os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return how


def _prune_empty_dirs(www: str, path: str) -> None:
    d = os.path.dirname(path)
    while d and os.path.abspath(d) != os.path.abspath(www):
        try:
            os.rmdir(d)
        except OSError:
            return
        d = os.path.dirname(d)


def materialise(
    bundle: str, www: str, link_mode: str = "auto", check_mode: bool = False, base_url: str = ""
) -> dict[str, Any]:
    manifest, _ = _read_manifest(bundle, ViewError, "{path}: no manifest.json, not a bundle copy")
    if link_mode not in ("auto", "copy"):
        raise ViewError(f"link_mode must be auto or copy, not {link_mode!r}")
    wanted = plan_view(manifest)
    state = read_state(www)
    todo = [
        rel
        for rel, e in sorted(wanted.items())
        if not _up_to_date(os.path.join(www, rel), e, state.get(rel), _linked_blob(bundle, e, link_mode))
    ]
    stale = sorted(rel for rel in state if rel not in wanted)
    new_state = {rel: e["digest"] for rel, e in wanted.items()}
    result = {
        "changed": bool(todo or stale or (new_state != state)),
        "entries": len(wanted),
        "written": len(todo),
        "removed": stale,
        "linked": 0,
        "copied": 0,
        **served_index(manifest, base_url),
    }
    if check_mode:
        return result
    os.makedirs(www, mode=0o755, exist_ok=True)
    for rel in todo:
        how = _materialise_one(bundle, os.path.join(www, rel), wanted[rel], link_mode)
        result[how] += 1
    for rel in stale:
        dest = os.path.join(www, _safe_rel(rel))
        if os.path.lexists(dest) and not os.path.isdir(dest):
            os.unlink(dest)
        _prune_empty_dirs(www, dest)
    if new_state != state:
        _write_state(www, new_state)
    return result


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "bundle_path": {"type": "path", "required": True},
            "www": {"type": "path", "required": True},
            "link_mode": {"type": "str", "default": "auto", "choices": ["auto", "copy"]},
            "base_url": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = materialise(p["bundle_path"], p["www"], p["link_mode"], module.check_mode, p["base_url"])
    except (ViewError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
