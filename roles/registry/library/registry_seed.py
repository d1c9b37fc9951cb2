#!/usr/bin/python3
"""Seed a docker-registry (distribution 2.x) filesystem store straight from the bundle.

Stdlib only, Python >= 3.8 (Ubuntu 20.04 nodes). The pure functions are imported by the
unit/integration tests and the benchmark; `main()` is the Ansible entry point."""

from __future__ import annotations

import errno
import grp
import os
import pwd
import re
from typing import Any, BinaryIO

from ansible.module_utils.bundle_manifest import free_bytes, mib, sha256_of
from ansible.module_utils.bundle_manifest import hex_of as _hex_of
from ansible.module_utils.bundle_manifest import read_manifest as _read_manifest

DOCUMENTATION = r"""
module: registry_seed
short_description: Lay the bundle's OCI images straight into a docker-registry storage directory
description:
  - Reads C(manifest.json) of the bundle copy on the master and writes every C(oci-image)
    artifact into the registry's filesystem layout, instead of pushing image by image.
  - "Blobs: C(docker/registry/v2/blobs/sha256/<2 hex>/<hex>/data), hard-linked from the bundle
    when on the same filesystem (auto), else copied with a sha256 check and fsync."
  - "Per repository: C(_layers/sha256/<hex>/link) for every layer and the config blob,
    C(_manifests/revisions/sha256/<hex>/link), C(_manifests/tags/<tag>/index/sha256/<hex>/link)
    and, last and atomically, C(_manifests/tags/<tag>/current/link). Link files hold exactly
    C(sha256:<hex>) with no trailing newline (a newline gives HTTP 500)."
  - "Repository name: the image reference with its registry host stripped
    (C(registry.k8s.io/pause:3.6) -> C(pause:3.6), C(docker.io/flannel/flannel:v0.22.3) ->
    C(flannel/flannel:v0.22.3)); C(library/) is kept as written in the reference."
  - Registry 2.8 answers 404 to manifest requests without the OCI Accept type for OCI
    manifests; every client must send C(Accept application/vnd.oci.image.manifest.v1+json).
options:
  bundle_path:
    description: The bundle copy on the master (holds manifest.json and blobs/sha256/).
    type: path
    required: true
  storage_root:
    description: The registry's C(storage.filesystem.rootdirectory).
    type: path
    default: /var/lib/docker-registry
  link_mode:
    description: C(auto) hard-links blobs (copy when cross-device); C(copy) always copies.
    type: str
    choices: [auto, copy]
    default: auto
  owner:
    description: User owning what the module creates (the registry service user); empty keeps root.
    type: str
    default: docker-registry
  group:
    description: Group owning what the module creates.
    type: str
    default: docker-registry
  images:
    description: Restrict seeding to these oci-image artifact names (empty = all).
    type: list
    elements: str
    default: []
  fsync:
    description: Make blobs durable (syncfs) before they are renamed into place, and links before the tags that refer to them.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Registry | Seed images from the bundle
  registry_seed:
    bundle_path: /srv/appliance/bundle
    storage_root: /var/lib/docker-registry
"""

RETURN = r"""
images:
  description: One entry per image (name, reference, repository, tag, digest, changed).
  type: list
  returned: always
blobs_linked:
  description: Blobs hard-linked into the store.
  type: int
  returned: always
blobs_copied:
  description: Blobs copied (with sha256 check) into the store.
  type: int
  returned: always
"""

BUF = 4 * 1024 * 1024
V2 = "docker/registry/v2"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
# distribution's reference grammar: path components and tags
_COMPONENT_RE = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*")
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


class SeedError(Exception):
    """A one-line, user-facing failure."""


# ---------------------------------------------------------------------------------------------
# Pure functions
# ---------------------------------------------------------------------------------------------
def hex_of(digest: str) -> str:
    return _hex_of(digest, SeedError, "not a sha256 digest:")


def link_content(digest: str) -> bytes:
    """What a registry link file holds: exactly `sha256:<hex>`, no trailing newline."""
    return ("sha256:" + hex_of(digest)).encode("ascii")


def split_reference(reference: str) -> tuple[str, str | None]:
    """Repository (registry host stripped) and tag of an image reference.

    The first path component is a registry host when it contains '.' or ':' or is
    'localhost' (the docker/distribution rule); it is dropped. Everything else is kept as
    written, `library/` included. A reference pinned only by digest has no tag (None)."""
    ref = reference.strip()
    if "@" in ref:
        ref = ref.split("@", 1)[0]
    name, tag = ref, None
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = ref.rsplit(":", 1)
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    repo = "/".join(parts)
    if not parts or not all(_COMPONENT_RE.fullmatch(p) for p in parts):
        raise SeedError(f"image reference {reference!r}: {repo!r} is not a valid repository name")
    if tag is not None and not _TAG_RE.fullmatch(tag):
        raise SeedError(f"image reference {reference!r}: {tag!r} is not a valid tag")
    return repo, tag


def seed_links(
    repo: str, tag: str | None, manifest_digest: str, blob_digests: list[str]
) -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    """repo_links() split in two phases: what the tag refers to, then the tag itself."""
    links = repo_links(repo, tag, manifest_digest, blob_digests)
    n = 2 if tag is not None else 0
    return links[: len(links) - n], links[len(links) - n :]


def _syncfs(path: str) -> None:
    """syncfs(2) on the filesystem holding path (os.sync() where libc has none)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        pass
    os.sync()


def blob_data_path(storage_root: str, digest: str) -> str:
    h = hex_of(digest)
    return os.path.join(storage_root, V2, "blobs", "sha256", h[:2], h, "data")


def repo_links(
    repo: str, tag: str | None, manifest_digest: str, blob_digests: list[str]
) -> list[tuple[str, bytes]]:
    """(relative path under docker/registry/v2, content) of every link file an image needs,
    in write order: layer/config links, the manifest revision, the tag index, and the tag's
    `current` link last (it makes the tag visible)."""
    base = f"repositories/{repo}"
    out = []
    seen = set()
    for d in blob_digests:
        if d in seen:
            continue
        seen.add(d)
        out.append((f"{base}/_layers/sha256/{hex_of(d)}/link", link_content(d)))
    mh = hex_of(manifest_digest)
    out.append((f"{base}/_manifests/revisions/sha256/{mh}/link", link_content(manifest_digest)))
    if tag is not None:
        out.append((f"{base}/_manifests/tags/{tag}/index/sha256/{mh}/link", link_content(manifest_digest)))
        out.append((f"{base}/_manifests/tags/{tag}/current/link", link_content(manifest_digest)))
    return out


def plan_images(manifest: dict[str, Any], only: list[str] | None = None) -> list[dict[str, Any]]:
    """The oci-image artifacts of a bundle manifest, as seeding plans.

    Each plan: name, reference, repository, tag, manifest_digest, blobs (digest -> list of
    (chunk digest, size) making up the blob, manifest first) and layer_links (layers + config)."""
    plans = []
    for art in manifest.get("artifacts", []):
        if art.get("kind") != "oci-image":
            continue
        if only and art.get("name") not in only:
            continue
        img = art.get("image") or {}
        label = "oci-image/{}".format(art.get("name"))
        if img.get("media_type") in INDEX_TYPES:
            raise SeedError(
                "{}: {} is an image index; the bundle must hold one platform's manifest".format(
                    label, img.get("manifest_digest")
                )
            )
        for key in ("reference", "manifest_digest", "config_digest"):
            if not img.get(key):
                raise SeedError(f"{label}: image.{key} is missing from the manifest")
        repo, tag = split_reference(img["reference"])
        by_digest = {}
        for f in art.get("files", []):
            chunks = f.get("chunks") or [{"digest": f["digest"], "size": f["size"]}]
            by_digest[f["digest"]] = [(c["digest"], int(c["size"])) for c in chunks]
        layers = list(img.get("layers") or [])
        needed = [img["manifest_digest"], img["config_digest"], *layers]
        blobs = {}
        for d in needed:
            if d not in by_digest:
                raise SeedError(f"{label}: blob {d} is not among the artifact's files")
            blobs[d] = by_digest[d]
        plans.append(
            {
                "name": art.get("name"),
                "reference": img["reference"],
                "repository": repo,
                "tag": tag,
                "manifest_digest": img["manifest_digest"],
                "media_type": img.get("media_type", OCI_MANIFEST),
                "blobs": blobs,
                "layer_links": [*layers, img["config_digest"]],
            }
        )
    return plans


# ---------------------------------------------------------------------------------------------
# Filesystem work
# ---------------------------------------------------------------------------------------------
def _copy_range(src: BinaryIO, out: BinaryIO, size: int) -> None:
    """Append `size` bytes of src to out: copy_file_range (no user-space copy) when the
    kernel and filesystems allow it, else read/write."""
    left = size
    cfr = getattr(os, "copy_file_range", None)
    if cfr is not None:
        out.flush()
        try:
            while left > 0:
                n = cfr(src.fileno(), out.fileno(), min(left, 1 << 30))
                if n == 0:
                    break
                left -= n
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF):
                raise
        # continue below from wherever the kernel copy stopped (file offsets moved with it)
    while left > 0:
        buf = src.read(min(left, BUF))
        if not buf:
            break
        out.write(buf)
        left -= len(buf)


class Seeder:
    def __init__(
        self,
        bundle_path: str,
        storage_root: str,
        link_mode: str = "auto",
        uid: int = -1,
        gid: int = -1,
        fsync: bool = True,
        check_mode: bool = False,
    ):
        if link_mode not in ("auto", "copy"):
            raise SeedError(f"link_mode must be auto or copy, not {link_mode!r}")
        self.bundle = bundle_path
        self.root = storage_root
        self.v2 = os.path.join(storage_root, V2)
        self.link_mode = link_mode
        self.uid, self.gid = uid, gid
        self.fsync = fsync
        self.check = check_mode
        self.linked = 0
        self.copied = 0
        self.links_written = 0
        self.pending: list[tuple[str, str]] = []

    # -- helpers -------------------------------------------------------------------------------
    def bundle_blob(self, digest: str) -> str:
        return os.path.join(self.bundle, "blobs", "sha256", hex_of(digest))

    def _chown(self, path: str) -> None:
        if self.uid >= 0 or self.gid >= 0:
            os.chown(path, self.uid, self.gid, follow_symlinks=False)

    def makedirs(self, path: str) -> None:
        """mkdir -p, owning every directory it creates (the registry writes next to them)."""
        if os.path.isdir(path):
            return
        parent = os.path.dirname(path)
        if parent and parent != path:
            self.makedirs(parent)
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            return
        os.chmod(path, 0o755)  # umask-proof
        self._chown(path)

    def _tmp(self, dest: str) -> str:
        return os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.seed-{os.getpid()}")

    # -- blobs ---------------------------------------------------------------------------------
    def blob_present(self, digest: str, parts: list[tuple[str, int]]) -> bool:
        try:
            st = os.stat(blob_data_path(self.root, digest))
        except FileNotFoundError:
            return False
        return st.st_size == sum(s for _, s in parts) and not self._stale_link(st, parts)

    def _stale_link(self, st: os.stat_result, parts: list[tuple[str, int]]) -> bool:
        """The store's `data` is not the bundle's current file where seeding would link it: the
        bundle's blob was replaced since (removed and copied again, a newer bundle), and the old
        inode, which may be the bad copy that was replaced, would be served on. Linked again."""
        if self.link_mode != "auto" or len(parts) != 1:
            return False  # copies: their bytes were hashed when written, whatever the bundle does
        try:
            src = os.stat(self.bundle_blob(parts[0][0]))
        except FileNotFoundError:
            return False  # put_blob is not reached for it: nothing to link to
        linkable = src.st_dev == st.st_dev and bool(src.st_mode & 0o004)
        return linkable and src.st_ino != st.st_ino

    def put_blob(self, digest: str, parts: list[tuple[str, int]]) -> bool:
        """Stage the blob's `data` file (hard link, or verified copy) next to its final name;
        `commit_blobs()` makes the staged files durable, then renames them into place."""
        if self.blob_present(digest, parts):
            return False
        if self.check:
            return True
        dest = blob_data_path(self.root, digest)
        self.makedirs(os.path.dirname(dest))
        tmp = self._tmp(dest)
        self.pending.append((tmp, dest))
        if self.link_mode == "auto" and len(parts) == 1 and self._try_link(parts[0], tmp):
            self.linked += 1
        else:
            self._copy(digest, parts, tmp)
            self.copied += 1
        return True

    def barrier(self) -> None:
        """Everything written so far reaches the disk before anything that refers to it:
        one syncfs per phase instead of an fsync per file (same guarantee, far fewer
        journal commits)."""
        if self.fsync and not self.check:
            _syncfs(self.root)

    def commit_blobs(self) -> None:
        self.barrier()
        while self.pending:
            tmp, dest = self.pending.pop(0)
            os.replace(tmp, dest)

    def discard_pending(self) -> None:
        for tmp, _ in self.pending:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        self.pending = []

    def _try_link(self, part: tuple[str, int], tmp: str) -> bool:
        src = self.bundle_blob(part[0])
        try:
            st = os.stat(src)
        except FileNotFoundError:
            raise SeedError(f"bundle blob {part[0]} is missing ({src})") from None
        if st.st_size != part[1]:
            raise SeedError(f"bundle blob {part[0]} has {st.st_size} bytes, the manifest says {part[1]}")
        if not st.st_mode & 0o004:
            return False  # the registry user could not read it: copy instead of chmod-ing the bundle
        try:
            os.link(src, tmp)
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                return False
            raise
        return True

    def _open_blob(self, digest: str) -> BinaryIO:
        try:
            return open(self.bundle_blob(digest), "rb")
        except FileNotFoundError:
            raise SeedError(f"bundle blob {digest} is missing ({self.bundle_blob(digest)})") from None

    def _copy(self, digest: str, parts: list[tuple[str, int]], tmp: str) -> None:
        """Copy (in-kernel where it can) the blob or its chunks to tmp, then hash what was
        written, fsync: only verified bytes are ever renamed into place."""
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as out:
                for cdig, csize in parts:
                    with self._open_blob(cdig) as src:
                        if os.fstat(src.fileno()).st_size != csize:
                            raise SeedError(
                                f"bundle blob {cdig} is corrupt: not {csize} bytes (run `appliance bundle verify`)"
                            )
                        _copy_range(src, out, csize)
                out.flush()
                got = sha256_of(tmp)
                if got != digest:
                    raise SeedError(f"bundle blob {digest} is corrupt: its content hashes to {got}")
            os.chmod(tmp, 0o644)
            self._chown(tmp)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise SeedError(f"no space left on device while writing {tmp}") from None
            raise

    # -- links ---------------------------------------------------------------------------------
    def put_link(self, rel: str, content: bytes) -> bool:
        dest = os.path.join(self.v2, rel)
        try:
            with open(dest, "rb") as f:
                if f.read() == content:
                    return False
        except FileNotFoundError:
            pass
        if self.check:
            return True
        self.makedirs(os.path.dirname(dest))
        tmp = self._tmp(dest)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            os.chmod(tmp, 0o644)
            self._chown(tmp)
            os.replace(tmp, dest)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        self.links_written += 1
        return True


def bytes_to_copy(seeder: Seeder, plans: list[dict[str, Any]]) -> int:
    """Upper bound of the bytes a run writes (blobs missing from the store)."""
    seen = {}
    for p in plans:
        for d, parts in p["blobs"].items():
            size = sum(s for _, s in parts)
            if d not in seen and not seeder.blob_present(d, parts):
                seen[d] = size
    return sum(seen.values())


def read_bundle_manifest(bundle_path: str) -> dict[str, Any]:
    return _read_manifest(
        bundle_path, SeedError, "{bundle}: no manifest.json, not a bundle (run the bundle_repo role first)"
    )[0]


def resolve_owner(owner: str, group: str) -> tuple[int, int]:
    uid = gid = -1
    if owner:
        try:
            uid = pwd.getpwnam(owner).pw_uid
        except KeyError:
            raise SeedError(
                f"user {owner!r} does not exist (is the docker-registry package installed?)"
            ) from None
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise SeedError(f"group {group!r} does not exist") from None
    return uid, gid


def seed(
    bundle_path: str,
    storage_root: str,
    link_mode: str = "auto",
    owner: str = "",
    group: str = "",
    images: list[str] | None = None,
    fsync: bool = True,
    check_mode: bool = False,
) -> dict[str, Any]:
    """Seed every (or the named) oci-image artifact; returns the module result."""
    manifest = read_bundle_manifest(bundle_path)
    plans = plan_images(manifest, images or None)
    if images:
        missing = sorted(set(images) - {p["name"] for p in plans})
        if missing:
            raise SeedError("the bundle has no oci-image artifact named {}".format(", ".join(missing)))
    uid, gid = resolve_owner(owner, group)
    s = Seeder(bundle_path, storage_root, link_mode, uid, gid, fsync, check_mode)
    need = bytes_to_copy(s, plans)
    if need and link_mode == "copy":
        have = free_bytes(storage_root)
        if have < need:
            raise SeedError(
                f"not enough free space on {storage_root}: the images need {mib(need)} more, {mib(have)} free; "
                "nothing was seeded (free space on the master's registry storage)"
            )
    if not check_mode and not os.path.isdir(s.v2):
        s.makedirs(s.v2)
    changed = {p["name"]: False for p in plans}
    written: dict[str, bool] = {}
    try:
        # 1. blobs (staged, verified), made durable, then renamed into place
        for p in plans:
            for d, parts in p["blobs"].items():
                if d not in written:
                    written[d] = s.put_blob(d, parts)
                changed[p["name"]] |= written[d]
        s.commit_blobs()
        # 2. layer/config links and manifest revisions; 3. after a barrier, the tags
        links = {
            p["name"]: seed_links(p["repository"], p["tag"], p["manifest_digest"], p["layer_links"])
            for p in plans
        }
        for phase in (0, 1):
            for p in plans:
                for rel, content in links[p["name"]][phase]:
                    changed[p["name"]] |= s.put_link(rel, content)
            s.barrier()
    except OSError as exc:
        raise SeedError(f"seeding {storage_root} failed: {exc}") from None
    finally:
        s.discard_pending()
    results = [
        {
            "name": p["name"],
            "reference": p["reference"],
            "repository": p["repository"],
            "tag": p["tag"],
            "digest": p["manifest_digest"],
            "media_type": p["media_type"],
            "changed": changed[p["name"]],
        }
        for p in plans
    ]
    return {
        "changed": any(r["changed"] for r in results),
        "images": results,
        "blobs_linked": s.linked,
        "blobs_copied": s.copied,
        "links_written": s.links_written,
    }


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "bundle_path": {"type": "path", "required": True},
            "storage_root": {"type": "path", "default": "/var/lib/docker-registry"},
            "link_mode": {"type": "str", "default": "auto", "choices": ["auto", "copy"]},
            "owner": {"type": "str", "default": "docker-registry"},
            "group": {"type": "str", "default": "docker-registry"},
            "images": {"type": "list", "elements": "str", "default": []},
            "fsync": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = seed(
            p["bundle_path"],
            p["storage_root"],
            p["link_mode"],
            p["owner"],
            p["group"],
            p["images"],
            p["fsync"],
            module.check_mode,
        )
    except SeedError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
