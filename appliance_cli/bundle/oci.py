"""OCI images: build small real images locally (lab), ingest an OCI layout (skopeo output,
vendor tars) into the blob store, and write the bundle-root OCI layout (oci-layout + index.json)
over the same blobs so skopeo/containerd can read the bundle directly."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from appliance_cli.bundle.model import (
    DIGEST_RE,
    OCI_INDEX,
    OCI_LAYOUT,
    OCI_LAYOUT_BYTES,
    Artifact,
    FileEntry,
    ImageInfo,
    OciIndexRef,
    sha256_digest,
    write_if_changed,
)
from appliance_cli.bundle.store import BlobStore
from appliance_cli.digest import sha256_file
from appliance_cli.errors import BundleError
from appliance_cli.rules.images import parse_reference

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
EPOCH = "1970-01-01T00:00:00Z"
# Keeps a container alive and stops on SIGTERM: enough for a sandbox (pause) or a placeholder pod.
DEFAULT_CMD = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]


def repository_of(reference: str) -> str:
    """registry.k8s.io/pause:3.6 -> registry.k8s.io/pause (a digest or tag dropped)."""
    return parse_reference(reference).repository


def tag_of(reference: str) -> str | None:
    return parse_reference(reference).tag


def blob_path(digest: object) -> str:
    """Path of a blob inside a per-image OCI layout (what <kind>/<name>/<path> materialises).
    The digest comes from an image's own index or manifest: 'sha256:../../x' would name a file
    outside the layout, so anything but sha256:<64 hex> is refused."""
    if not isinstance(digest, str) or not DIGEST_RE.fullmatch(digest):
        raise BundleError(f"not a sha256 digest: {digest!r}")
    return "blobs/sha256/" + digest.split(":", 1)[1]


# ---------------------------------------------------------------------------------------------
# Local image builder (lab: no registry reachable). Deterministic: same input, same digests.
# ---------------------------------------------------------------------------------------------
def _tar_bytes(add) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        add(t)
    return raw.getvalue()


def _dir(t: tarfile.TarFile, path: str, mode: int = 0o755) -> None:
    ti = tarfile.TarInfo(path)
    ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, mode, 0
    t.addfile(ti)


def _file(t: tarfile.TarFile, path: str, data: bytes, mode: int = 0o644) -> None:
    ti = tarfile.TarInfo(path)
    ti.size, ti.mode, ti.mtime = len(data), mode, 0
    t.addfile(ti, io.BytesIO(data))


@dataclass(frozen=True)
class Layer:
    diff_id: str
    blob: bytes  # gzip-compressed tar

    @property
    def digest(self) -> str:
        return sha256_digest(self.blob)


def _layer(tar: bytes) -> Layer:
    return Layer(diff_id=sha256_digest(tar), blob=gzip.compress(tar, compresslevel=6, mtime=0))


@cache
def busybox_base_layer(busybox: str) -> Layer:
    """The shared base: busybox + its applet links + /etc basics. One blob for every lab image."""
    bb = Path(busybox)
    if not bb.is_file():
        raise BundleError(f"busybox binary {bb} not found", hint="apt-get install busybox-static")
    data = bb.read_bytes()
    try:
        applets = subprocess.run(
            [str(bb), "--list"], capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BundleError(f"{bb} --list failed: {exc}") from None

    def add(t: tarfile.TarFile) -> None:
        for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "root", "var", "run"):
            _dir(t, d, 0o1777 if d == "tmp" else 0o755)
        _file(t, "bin/busybox", data, 0o755)
        for a in sorted(set(applets) - {"busybox"}):
            ti = tarfile.TarInfo("bin/" + a)
            ti.type, ti.linkname, ti.mtime, ti.mode = tarfile.SYMTYPE, "busybox", 0, 0o777
            t.addfile(ti)
        _file(t, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
        _file(t, "etc/group", b"root:x:0:\nnogroup:x:65534:\n")

    return _layer(_tar_bytes(add))


def wheel_layer(wheel: Path, files: dict[str, str], label: str) -> Layer:
    """One layer of the wheel's members at their paths in the image (an executable member kept
    executable)."""
    try:
        with zipfile.ZipFile(wheel) as z:
            missing = [m for m in files if m not in z.NameToInfo]
            if missing:
                raise BundleError(f"{label}: the wheel {wheel.name} has no member {missing[0]}")
            blobs = {
                m: (z.read(m), 0o755 if (z.getinfo(m).external_attr >> 16) & 0o111 else 0o644) for m in files
            }
    except (OSError, zipfile.BadZipFile) as exc:
        raise BundleError(f"{label}: {wheel.name} is not a readable wheel: {exc}") from None
    return files_layer(blobs, files)


def files_layer(blobs: dict[str, tuple[bytes, int]], files: dict[str, str]) -> Layer:
    """One layer of BLOBS (member -> bytes, mode) at the paths FILES gives them (member -> path in
    the image), parent directories made, in the order `files` names them."""

    def add(t: tarfile.TarFile) -> None:
        made: set[str] = set()
        for member, dest in files.items():
            parts = dest.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in made:
                    made.add(d)
                    _dir(t, d)
            data, mode = blobs[member]
            _file(t, dest, data, 0o755 if mode & 0o111 else 0o644)

    return _layer(_tar_bytes(add))


def build_local_image(
    reference: str, busybox: str, cmd: list[str] | None = None, extra: tuple[Layer, str] | None = None
) -> dict[str, bytes]:
    """The shared busybox base + a tiny layer naming the image (+ `extra`: a layer and what made it).
    Returns {digest: bytes} with the manifest digest under key 'manifest'."""
    base = busybox_base_layer(busybox)
    ident = _layer(_tar_bytes(lambda t: _file(t, "etc/appliance-image", (reference + "\n").encode())))
    layers = [base, ident] + ([extra[0]] if extra else [])
    history = [
        {"created": EPOCH, "created_by": "appliance bundle: busybox base"},
        {"created": EPOCH, "created_by": f"appliance bundle: identity {reference}"},
    ] + ([{"created": EPOCH, "created_by": f"appliance bundle: {extra[1]}"}] if extra else [])
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": EPOCH,
        "config": {
            "Env": ["PATH=/usr/local/bin:/bin"] if extra else ["PATH=/bin"],
            "Entrypoint": cmd or DEFAULT_CMD,
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": history,
    }
    config_b = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": sha256_digest(config_b), "size": len(config_b)},
        "layers": [
            {"mediaType": MT_LAYER_GZ, "digest": layer.digest, "size": len(layer.blob)} for layer in layers
        ],
    }
    manifest_b = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    return {"manifest": manifest_b, sha256_digest(config_b): config_b} | {
        layer.digest: layer.blob for layer in layers
    }


def store_local_image(
    store: BlobStore, name: str, reference: str, busybox: str, cmd: list[str] | None, test_only: bool,
    extra: tuple[Layer, str] | None = None,
) -> Artifact:  # fmt: skip
    blobs = build_local_image(reference, busybox, cmd, extra)
    manifest_b = blobs.pop("manifest")
    files = [store.add_bytes(blob_path(sha256_digest(manifest_b)), manifest_b)]
    files += [store.add_bytes(blob_path(d), b) for d, b in blobs.items()]
    return image_artifact(name, reference, manifest_b, MT_MANIFEST, files, test_only=test_only)


# ---------------------------------------------------------------------------------------------
# Ingest an OCI image layout directory (skopeo `oci:` output or a vendor's layout).
# ---------------------------------------------------------------------------------------------
def read_layout_manifest(layout: Path, ref_name: str | None = None) -> tuple[bytes, str]:
    """Manifest bytes + media type of the image in `layout` (the one named ref_name, or the only one)."""
    entries = layout_entries(layout)
    if ref_name is not None:
        key = "org.opencontainers.image.ref.name"
        named = [e for e in entries if e.get("annotations", {}).get(key) == ref_name]
        entries = named or entries
    if len(entries) != 1:
        raise BundleError(f"{layout}: expected exactly one image in index.json, found {len(entries)}")
    return resolve_desc(layout, entries[0])


def layout_entries(layout: Path) -> list[dict]:
    try:
        index = json.loads((layout / OCI_INDEX).read_bytes())
    except (OSError, ValueError) as exc:
        raise BundleError(f"{layout}: unreadable OCI index.json: {exc}") from None
    return list(index.get("manifests", []))


def resolve_desc(layout: Path, desc: dict) -> tuple[bytes, str]:
    """Follow an index entry down to a linux/amd64 image manifest."""
    while True:
        data = _read_layout_blob(layout, desc["digest"])
        mt = desc.get("mediaType") or json.loads(data).get("mediaType", MT_MANIFEST)
        if mt not in (MT_INDEX, DOCKER_LIST):
            return data, mt
        subs = [
            m
            for m in json.loads(data).get("manifests", [])
            if (m.get("platform") or {}).get("os") == "linux"
            and (m.get("platform") or {}).get("architecture") == "amd64"
        ]
        if not subs:
            raise BundleError(f"{layout}: image index {desc['digest']} has no linux/amd64 manifest")
        desc = subs[0]


def _read_layout_blob(layout: Path, digest: str) -> bytes:
    p = layout / blob_path(digest)
    try:
        data = p.read_bytes()
    except OSError:
        raise BundleError(f"{layout}: blob {digest} is missing") from None
    if sha256_digest(data) != digest:
        raise BundleError(f"{layout}: blob {digest} is corrupt")
    return data


def ingest_layout_image(
    store: BlobStore,
    layout: Path,
    name: str,
    reference: str,
    *,
    ref_name: str | None = None,
    source_digest: str | None = None,
    test_only: bool = False,
) -> Artifact:
    manifest_b, mt = read_layout_manifest(layout, ref_name)
    return ingest_manifest(store, layout, manifest_b, mt, name, reference, source_digest, test_only)


def ingest_manifest(
    store: BlobStore,
    layout: Path,
    manifest_b: bytes,
    mt: str,
    name: str,
    reference: str,
    source_digest: str | None = None,
    test_only: bool = False,
) -> Artifact:
    m = json.loads(manifest_b)
    files = [store.add_bytes(blob_path(sha256_digest(manifest_b)), manifest_b)]
    for desc in [m["config"], *m.get("layers", [])]:
        digest, size = desc["digest"], int(desc["size"])
        src = layout / blob_path(digest)
        entry = store.try_reuse(blob_path(digest), digest, size) or store.add_file(
            blob_path(digest), src, expect_digest=digest
        )
        files.append(entry)
    return image_artifact(
        name, reference, manifest_b, mt, files, source_digest=source_digest, test_only=test_only
    )


def image_artifact(
    name: str,
    reference: str,
    manifest_b: bytes,
    media_type: str,
    files: list[FileEntry],
    *,
    source_digest: str | None = None,
    test_only: bool = False,
) -> Artifact:
    m = json.loads(manifest_b)
    digest = sha256_digest(manifest_b)
    return Artifact(
        name=name,
        kind="oci-image",
        version=reference.rsplit(":", 1)[-1] if ":" in reference.rsplit("/", 1)[-1] else None,
        size=sum(f.size for f in _unique(files)),
        digest=digest,
        test_only=test_only,
        files=_unique(files),
        image=ImageInfo(
            reference=reference,
            manifest_digest=digest,
            media_type=media_type,
            config_digest=m["config"]["digest"],
            layers=[layer["digest"] for layer in m.get("layers", [])],
            source_digest=source_digest,
        ),
    )


def _unique(files: list[FileEntry]) -> list[FileEntry]:
    seen, out = set(), []
    for f in files:
        if f.path not in seen:
            seen.add(f.path)
            out.append(f)
    return out


# ---------------------------------------------------------------------------------------------
# Bundle-root OCI layout
# ---------------------------------------------------------------------------------------------
def write_root_layout(root: Path, artifacts: list[Artifact]) -> OciIndexRef | None:
    images = [a for a in artifacts if a.kind == "oci-image" and a.image]
    if not images:
        (root / OCI_INDEX).unlink(missing_ok=True)
        (root / OCI_LAYOUT).unlink(missing_ok=True)
        return None
    manifests = []
    for a in images:
        img = a.image
        assert img is not None
        mfile = next(f for f in a.files if f.digest == img.manifest_digest)
        manifests.append(
            {
                "mediaType": img.media_type,
                "digest": img.manifest_digest,
                "size": mfile.size,
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    # skopeo `oci:<bundle>:<reference>` and containerd's import both read these
                    "org.opencontainers.image.ref.name": img.reference,
                    "io.containerd.image.name": img.reference,
                },
            }
        )
    index = json.dumps({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": manifests}, indent=1).encode()
    write_if_changed(root / OCI_LAYOUT, OCI_LAYOUT_BYTES)
    write_if_changed(root / OCI_INDEX, index)
    return OciIndexRef(digest=sha256_digest(index), size=len(index))


def digest_of_file(path: Path) -> str:
    return "sha256:" + sha256_file(path)[0]
