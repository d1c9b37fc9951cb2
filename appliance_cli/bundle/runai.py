"""`bundle import-runai`: add the vendor's air-gapped Run:ai tar to a bundle.

The tar is checked member by member before anything is extracted: absolute paths, '..', symlinks,
hard links and device files are refused (a vendor tar has no business writing outside its folder).
Inside it, OCI layouts and image tarballs (OCI archive or `docker save`) become oci-image
artifacts, helm chart .tgz files become helm-chart artifacts, everything else one `file` artifact."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
import uuid
from pathlib import Path, PurePosixPath

from appliance_cli import yamlfile
from appliance_cli.bundle import oci
from appliance_cli.bundle.model import (
    BLOB_DIR,
    MANIFEST,
    OCI_INDEX,
    OCI_LAYOUT,
    SIGNATURE,
    STAGING,
    Artifact,
    FileEntry,
    atomic_write,
    load_manifest,
    sha256_digest,
    tree_digest,
)
from appliance_cli.bundle.progress import ProgressEvent, ProgressFn, no_progress
from appliance_cli.bundle.store import BlobStore
from appliance_cli.errors import BundleError

# The names Run:ai support ships: runai-<version>.tar for an install, runai-air-gapped-<version>.tar
# for an update (the appliance guide's "Updating the appliance"; "Run:ai-" as the guide prints it).
# Both are imported as file/runai-<version>, the artifact bundlegate looks for.
_VERSION_RE = re.compile(
    r"(?i)run[:_-]?ai[-_](?:air[-_]gapped[-_])?(?P<version>[0-9][0-9A-Za-z.+_-]*?)\.(?:tar|tar\.gz|tgz)"
)
MT_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"


def check_members(tar: tarfile.TarFile, label: str) -> list[tarfile.TarInfo]:
    members = []
    for m in tar.getmembers():
        parts = PurePosixPath(m.name).parts
        if not parts and not m.isdir():  # a file that would be written over the extraction root
            raise BundleError(f"{label}: refusing member {m.name!r}: a file without a name")
        if m.name.startswith("/") or PurePosixPath(m.name).is_absolute():
            raise BundleError(f"{label}: refusing member {m.name!r}: absolute path")
        if ".." in parts:
            raise BundleError(f"{label}: refusing member {m.name!r}: '..' in path")
        if m.issym() or m.islnk():
            raise BundleError(
                f"{label}: refusing member {m.name!r}: {'symlink' if m.issym() else 'hard link'}"
            )
        if not (m.isfile() or m.isdir()):
            raise BundleError(f"{label}: refusing member {m.name!r}: not a regular file or directory")
        members.append(m)
    return members


def _open_tar(path: Path, label: str) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise BundleError(f"{label}: not a readable tar archive ({exc})") from None


def _extract(path: Path, dest: Path, label: str) -> None:
    with _open_tar(path, label) as tar:
        members = check_members(tar, label)
        try:
            tar.extractall(dest, members=members, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise BundleError(f"{label}: extraction failed: {exc}") from None


def _safe_name(ref: str) -> str:
    """An artifact name (model._NAME_RE): what the vendor named it, from its first letter or digit."""
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", ref).lstrip("_.+-").rstrip("_.")
    return (name or "image")[:200]


def import_runai(
    tar_path: Path | str, into: Path | str, progress: ProgressFn = no_progress
) -> list[Artifact]:
    tar_path, root = Path(tar_path), Path(into)
    label = tar_path.name
    if not tar_path.is_file():
        raise BundleError(f"{tar_path}: no such file")
    m = _VERSION_RE.fullmatch(tar_path.name)
    if m is None:
        raise BundleError(
            f"{label}: no Run:ai version in the file's name",
            hint="import the tar under the name Run:ai support gave it: runai-<version>.tar "
            "(install) or runai-air-gapped-<version>.tar (update), e.g. runai-air-gapped-2.9.0.tar",
        )
    version = m.group("version")
    manifest, _ = load_manifest(root)
    # Check every member before extracting anything.
    with _open_tar(tar_path, label) as tar:
        check_members(tar, label)
    store = BlobStore(root, chunk_size=manifest.chunk_size, progress=progress)
    work = root / STAGING / f"runai-{uuid.uuid4().hex}"
    progress(ProgressEvent("start", f"import {label}"))
    try:
        _extract(tar_path, work, label)
        new = _collect(store, work, version, label)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(ProgressEvent("end", f"import {label}"))
    labels = {a.label for a in new}
    artifacts = [a for a in manifest.artifacts if a.label not in labels] + new
    manifest = manifest.model_copy(update={"artifacts": artifacts})
    manifest = manifest.model_copy(update={"oci_index": oci.write_root_layout(root, artifacts)})
    (root / SIGNATURE).unlink(missing_ok=True)  # the old signature covers the old manifest
    atomic_write(root / MANIFEST, manifest.to_json())
    store.clean_staging()
    _drop_replaced_blobs(root, manifest.blob_owners())
    return new


def _drop_replaced_blobs(root: Path, owners: dict) -> None:
    """An update tar replaces the charts, images and files of the version before it: their blobs,
    which the new manifest no longer names, go (verify refuses a bundle with blobs it does not
    name). After the manifest is written, so a crash between the two leaves extra blobs, never a
    manifest naming missing ones."""
    for p in (root / BLOB_DIR).iterdir():
        if p.name not in owners:
            p.unlink()


def _collect(store: BlobStore, work: Path, version: str, label: str) -> list[Artifact]:
    arts: list[Artifact] = []
    consumed: set[Path] = set()
    # OCI layout directories shipped unpacked
    for layout_file in sorted(work.rglob(OCI_LAYOUT)):
        layout = layout_file.parent
        arts += _layout_images(store, layout, f"{label}: {layout.relative_to(work)}")
        consumed |= {p for p in layout.rglob("*")} | {layout}
    for p in sorted(work.rglob("*")):
        if p in consumed or not p.is_file():
            continue
        if p.name.endswith(".tar"):
            imgs = _image_tar(store, p, label)
            if imgs:
                arts += imgs
                consumed.add(p)
        elif p.name.endswith((".tgz", ".tar.gz")) and (chart := _chart(store, p)):
            arts.append(chart)
            consumed.add(p)
    rest = [p for p in sorted(work.rglob("*")) if p.is_file() and p not in consumed]
    if rest:
        top = _top_folder(work)
        files = [store.add_file(p.relative_to(top).as_posix(), p, mode=_exec_mode(p)) for p in rest]
        arts.append(
            Artifact(
                name=f"runai-{_safe_name(version)}",
                kind="file",
                version=version,
                size=sum(f.size for f in files),
                digest=tree_digest(files),
                files=files,
            )
        )
    if not arts:
        raise BundleError(f"{label}: no images, charts or files found in the archive")
    seen: set[str] = set()
    for a in arts:
        if a.label in seen:
            raise BundleError(f"{label}: two entries map to the same artifact {a.label}")
        seen.add(a.label)
    return arts


def _top_folder(work: Path) -> Path:
    """The vendor's one top folder (`deploy/`: the guide extracts, then `cd deploy`), so the file
    artifact holds `bin/runai-adm`, `bin/runai`, … whatever the folder is called; the
    extraction root when the tar has several top-level entries."""
    entries = list(work.iterdir())
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else work


def _exec_mode(p: Path) -> str | None:
    """'0755' for an executable (runai-adm, runai, the vendor's scripts), else the default."""
    return "0755" if p.stat().st_mode & 0o111 else None


def _layout_images(store: BlobStore, layout: Path, label: str) -> list[Artifact]:
    arts = []
    try:
        for desc in oci.layout_entries(layout):
            if not (isinstance(desc, dict) and isinstance(desc.get("digest"), str)):
                raise BundleError("index.json: a manifests entry is not a descriptor with a digest")
            ann = desc.get("annotations")
            ann = ann if isinstance(ann, dict) else {}
            ref = ann.get("io.containerd.image.name") or ann.get("org.opencontainers.image.ref.name")
            if not isinstance(ref, str) or not ref:
                ref = f"unnamed@{desc['digest']}"
            manifest_b, mt = oci.resolve_desc(layout, desc)
            arts.append(oci.ingest_manifest(store, layout, manifest_b, mt, _safe_name(ref), ref))
    except BundleError as exc:  # e.g. a digest that is no digest, naming a path outside the layout
        raise BundleError(f"{label}: {exc.message}", exc.hint) from None
    except OSError as exc:  # a blob that is a directory
        raise BundleError(f"{label}: {exc.filename}: {exc.strerror}") from None
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:  # JSON of another shape
        raise BundleError(f"{label}: not an OCI image layout ({type(exc).__name__}: {exc})"[:300]) from None
    return arts


def _image_tar(store: BlobStore, path: Path, label: str) -> list[Artifact]:
    """An OCI archive or a `docker save` tarball nested in the vendor tar; [] if neither."""
    try:
        with tarfile.open(path, "r:*") as t:
            names = set(t.getnames())
    except (tarfile.TarError, OSError):
        return []
    if OCI_LAYOUT not in names and MANIFEST not in names:
        return []
    sub = path.with_name(path.name + ".d")
    _extract(path, sub, f"{label}: {path.name}")
    try:
        if (sub / OCI_LAYOUT).is_file() and (sub / OCI_INDEX).is_file():
            return _layout_images(store, sub, f"{label}: {path.name}")
        return _docker_save(store, sub, f"{label}: {path.name}")
    finally:
        shutil.rmtree(sub, ignore_errors=True)


def _docker_save(store: BlobStore, sub: Path, label: str) -> list[Artifact]:
    """Re-describe a `docker save` image as an OCI manifest over the same (uncompressed) layers."""
    try:
        entries = json.loads((sub / MANIFEST).read_bytes())
    except (OSError, ValueError):
        raise BundleError(f"{label}: unreadable docker-save manifest.json") from None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("Layers"), list) for e in entries
    ):
        raise BundleError(f"{label}: docker-save manifest.json is not a list of {{Config, Layers}}")
    arts = []
    for e in entries:
        config_b = _inside(sub, e.get("Config"), label).read_bytes()
        files = [store.add_bytes(oci.blob_path(sha256_digest(config_b)), config_b)]
        layers = []
        for rel in e["Layers"]:
            src = _inside(sub, rel, label)
            digest = oci.digest_of_file(src)
            f = store.add_file(oci.blob_path(digest), src, expect_digest=digest)
            files.append(f)
            layers.append({"mediaType": MT_LAYER_TAR, "digest": f.digest, "size": f.size})
        manifest = {
            "schemaVersion": 2,
            "mediaType": oci.MT_MANIFEST,
            "config": {"mediaType": oci.MT_CONFIG, "digest": sha256_digest(config_b), "size": len(config_b)},
            "layers": layers,
        }
        manifest_b = json.dumps(manifest, separators=(",", ":")).encode()
        files.insert(0, store.add_bytes(oci.blob_path(sha256_digest(manifest_b)), manifest_b))
        for ref in e.get("RepoTags") or [f"unnamed@{sha256_digest(manifest_b)}"]:
            arts.append(oci.image_artifact(_safe_name(ref), ref, manifest_b, oci.MT_MANIFEST, list(files)))
    return arts


def _inside(sub: Path, rel: object, label: str) -> Path:
    """A path named by the image's manifest.json, as a regular file of this image's extraction:
    an absolute path, '..' or a symlink on the way would copy a file of the build host (or of
    the vendor tar outside this image) into the bundle."""
    if not isinstance(rel, str) or not rel or not rel.isprintable():
        raise BundleError(f"{label}: manifest.json names {rel!r}: not a path inside the image")
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts:
        raise BundleError(f"{label}: manifest.json names {rel!r}: outside the image")
    base = sub.resolve()
    path = base.joinpath(*pure.parts)
    try:
        if path.resolve() != path:  # a symlink somewhere on the way
            raise BundleError(f"{label}: manifest.json names {rel!r}: a symlink, outside the image")
        if not path.is_file():
            raise BundleError(f"{label}: manifest.json names {rel!r}: not a regular file in the image")
    except OSError as exc:  # a name too long, a loop
        raise BundleError(f"{label}: manifest.json names {rel[:80]!r}: {exc.strerror}") from None
    return path


def _chart(store: BlobStore, path: Path) -> Artifact | None:
    try:
        with tarfile.open(path, "r:gz") as t:
            chart_yaml = next(
                (
                    m
                    for m in t.getmembers()
                    if m.name.count("/") == 1 and m.name.endswith("/Chart.yaml") and m.isfile()
                ),
                None,
            )
            if chart_yaml is None:
                return None
            fobj = t.extractfile(chart_yaml)
            text = fobj.read().decode(errors="replace") if fobj else ""
    except (tarfile.TarError, OSError):
        return None
    try:
        meta = yamlfile.loads(text)
    except yamlfile.YamlError:
        meta = None
    if not isinstance(meta, dict):  # unreadable, or not a mapping: named after its file instead
        meta = {}
    entry: FileEntry = store.add_file(path.name, path)
    return Artifact(
        name=_safe_name(str(meta.get("name") or path.stem)),
        kind="helm-chart",
        version=str(meta.get("version")) if meta.get("version") else None,
        size=entry.size,
        digest=entry.digest,
        files=[entry],
    )
