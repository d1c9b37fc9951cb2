"""`bundle build`: turn a profile into a bundle directory.

Incremental: blobs already in the bundle are not rewritten, pinned downloads already in the cache
are not fetched again, an image whose pinned digest the previous manifest already holds is not
pulled again. Resumable: blobs are staged then renamed, manifest.json is written last (atomically),
so an interrupted build leaves the previous manifest (or none) and a re-run picks up where it was."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from appliance_cli import __version__
from appliance_cli.bundle import chartpack, oci, toolkit_script, zipapp
from appliance_cli.bundle.aptsign import AptSigner
from appliance_cli.bundle.fetch import download_to, fetch
from appliance_cli.bundle.lockfile import AptLock, load_lock, lock_path
from appliance_cli.bundle.mirrors import NO_MIRRORS, MirrorMap
from appliance_cli.bundle.model import (
    BLOB_DIR,
    DEFAULT_CHUNK_SIZE,
    INSTALL_SCRIPT,
    MANIFEST,
    OCI_INDEX,
    OCI_LAYOUT,
    SIGNATURE,
    STAGING,
    AptInfo,
    Artifact,
    FileEntry,
    Manifest,
    RootFile,
    Source,
    atomic_write,
    parse_manifest,
    sha256_digest,
    tree_digest,
    write_if_changed,
)
from appliance_cli.bundle.pins import Pinned, pin_profile
from appliance_cli.bundle.profile import (
    ChartSpec,
    FileSpec,
    ImageSpec,
    Profile,
    WheelSpec,
    load_profile,
)
from appliance_cli.bundle.progress import ProgressEvent, ProgressFn, no_progress
from appliance_cli.bundle.store import BlobStore
from appliance_cli.bundle.verify import hash_file
from appliance_cli.content import content_root
from appliance_cli.debian import aptclosure, debdir, rootfs
from appliance_cli.errors import BundleError
from appliance_cli.fsutil import atomic_path

BUNDLE_ENTRIES = {MANIFEST, SIGNATURE, OCI_LAYOUT, OCI_INDEX, INSTALL_SCRIPT, "blobs", STAGING}


@dataclass
class BuildOptions:
    profile: str | Path
    out: Path
    cache: Path | None = None
    chunk_size: int = DEFAULT_CHUNK_SIZE
    repo_root: Path | None = None  # where profile `source:` paths are resolved
    busybox: str | None = None
    fsync: bool = True
    progress: ProgressFn = no_progress
    mirrors: MirrorMap = NO_MIRRORS  # where to fetch upstream URLs and registries from


@dataclass
class BuildResult:
    path: Path
    manifest: Manifest
    blobs_written: int
    blobs_skipped: int
    bytes_written: int
    pruned: int
    seconds: float
    signature_kept: bool
    notes: list[str] = field(default_factory=list)


def default_cache(out: Path) -> Path:
    """Where a bundle built at `out` keeps its download cache unless told otherwise."""
    return out.parent / f".{out.name}.cache"


# In the build cache: held for the whole build. Two builds of other bundles on one cache (the lab
# bundle and an older one, say) take its shared apt repository and downloads in turn, not at once.
CACHE_LOCK = ".build.lock"


def _hold_cache(fd: int, cache: Path, progress: ProgressFn) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        progress(
            ProgressEvent("note", str(cache), message="another build is using this cache: waiting for it")
        )
        fcntl.flock(fd, fcntl.LOCK_EX)


def build_bundle(opts: BuildOptions) -> BuildResult:
    started = time.perf_counter()
    prof = load_profile(opts.profile)
    assert prof.source_path is not None
    # the lock only: a tag is never resolved and a checksum never trusted at build time
    pinned = pin_profile(prof, load_lock(lock_path(prof.source_path), prof.name))
    prof = pinned.profile
    repo_root = opts.repo_root or content_root()
    _check_sources(prof, repo_root)
    out = opts.out
    _prepare_out(out)
    cache = opts.cache or default_cache(out)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BundleError(f"cannot create cache directory {cache}: {exc.strerror}") from None

    lock = os.open(out, os.O_RDONLY)
    cache_lock = os.open(cache / CACHE_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BundleError(f"{out}: another `bundle build` is writing this bundle") from None
        _hold_cache(cache_lock, cache, opts.progress)
        shutil.rmtree(out / STAGING, ignore_errors=True)  # leftovers of an interrupted run
        store = BlobStore(out, chunk_size=opts.chunk_size, fsync=opts.fsync, progress=opts.progress)
        previous = _previous_manifest(out)
        b = _Builder(pinned, store, cache, repo_root, opts, previous)
        artifacts = b.run()
        oci_ref = oci.write_root_layout(out, artifacts)
        script = _write_install_script(out, artifacts)
        pruned = store.prune()
        store.clean_staging()
        manifest = Manifest(
            profile=prof.name,
            created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            tool_version=__version__,
            chunk_size=opts.chunk_size,
            oci_index=oci_ref,
            install_script=script,
            artifacts=artifacts,
        )
        kept = _write_manifest(out, manifest, previous)
    finally:
        os.close(cache_lock)
        os.close(lock)
    st = store.stats
    return BuildResult(
        out,
        manifest,
        st.written,
        st.skipped,
        st.bytes_written,
        len(pruned),
        time.perf_counter() - started,
        kept,
        b.notes,
    )


def _check_sources(prof: Profile, repo_root: Path) -> None:
    for e in [*prof.files, *prof.charts]:
        if not e.source:
            continue
        src = repo_root / e.source
        if not (src.is_file() or zipapp.is_package_dir(src) or chartpack.is_chart_dir(src)):
            raise BundleError(
                f"profile {prof.name}: {e.name}: source file {src} does not exist",
                hint="test stand-ins live under tests/standin/; build them first or fix the path",
            )


def _prepare_out(out: Path) -> None:
    if out.exists():
        if not out.is_dir():
            raise BundleError(f"{out} exists and is not a directory")
        strangers = sorted(p.name for p in out.iterdir() if p.name not in BUNDLE_ENTRIES)
        if strangers:
            raise BundleError(
                f"{out} is not a bundle directory (it holds {strangers[0]})",
                hint="choose an empty or new --out directory",
            )
    try:
        (out / BLOB_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BundleError(f"cannot create {out}: {exc.strerror}") from None


def _previous_manifest(out: Path) -> Manifest | None:
    try:
        return parse_manifest((out / MANIFEST).read_bytes())
    except (OSError, BundleError):
        return None


def _write_install_script(out: Path, artifacts: list[Artifact]) -> RootFile | None:
    """install-toolkit.sh at the root when the bundle carries the toolkit's wheel; recorded in the
    manifest (path, digest, size) so verify accounts for it and catches an edited copy."""
    data = toolkit_script.render(artifacts)
    path = out / INSTALL_SCRIPT
    if data is None:
        path.unlink(missing_ok=True)  # a script left from a build that had the toolkit
        return None
    write_if_changed(path, data, mode=0o755)
    return RootFile(path=INSTALL_SCRIPT, digest=sha256_digest(data), size=len(data))


def _write_manifest(out: Path, manifest: Manifest, previous: Manifest | None) -> bool:
    """Keep the old manifest (and its signature) when nothing but the timestamp would change."""
    if previous is not None:
        same = previous.model_copy(update={"created": manifest.created}).to_json() == manifest.to_json()
        if same and (out / MANIFEST).exists():
            return (out / SIGNATURE).exists()
    (out / SIGNATURE).unlink(missing_ok=True)  # a signature over another manifest is worthless
    atomic_write(out / MANIFEST, manifest.to_json())
    return False


class _Builder:
    def __init__(
        self,
        pinned: Pinned,
        store: BlobStore,
        cache: Path,
        repo_root: Path,
        opts: BuildOptions,
        previous: Manifest | None,
    ):
        self.pinned, self.prof = pinned, pinned.profile
        self.store, self.cache, self.repo_root = store, cache, repo_root
        self.opts, self.previous = opts, previous
        self.progress = opts.progress
        self.notes: list[str] = []
        self.signer = AptSigner(cache)

    def note(self, item: str, message: str) -> None:
        self.progress(ProgressEvent("note", item, message=message))

    def run(self) -> list[Artifact]:
        arts: list[Artifact] = []
        for spec in self.prof.files:
            if not spec.from_deb:  # those are packed from the apt repositories, built last
                arts.append(self.file_artifact(spec, "file"))
        for spec in self.prof.charts:
            arts.append(self.file_artifact(spec, "helm-chart"))
        for image in self.prof.images:
            arts.append(self.image(image))
        for wheel in self.prof.wheels:
            arts += self.wheels(wheel)
        try:
            for apt in self.prof.apt:
                arts.append(self.apt(apt))
        finally:
            self.signer.close()
        for spec in self.prof.files:
            if spec.from_deb:
                arts.append(self.file_artifact(spec, "file"))
        return arts

    # -- files and charts ---------------------------------------------------------------------
    def file_artifact(self, spec: FileSpec, kind: str) -> Artifact:
        label = f"{kind}/{spec.name}"
        self.progress(ProgressEvent("start", label))
        if spec.url:
            assert spec.sha256
            digest = "sha256:" + spec.sha256
            fname = spec.filename or spec.url.rstrip("/").rsplit("/", 1)[-1]
            entry = None
            if (self.store.path(digest)).is_file():
                size = self.store.path(digest).stat().st_size
                entry = self.store.try_reuse(fname, digest, size, spec.mode)
            if entry is None:
                src = fetch(
                    self.opts.mirrors.url(spec.url),
                    spec.sha256,
                    self.cache / "files",
                    label,
                    self.progress,
                    pinned_by="the lock" if self.prof.production else "the profile",
                )
                entry = self.store.add_file(fname, src, mode=spec.mode, expect_digest=digest)
            source = Source(url=spec.url, sha256=spec.sha256)
        elif spec.from_deb:
            entry, source = self._packed_from_deb(spec, label)
        elif spec.source and chartpack.is_chart_dir(self.repo_root / spec.source):
            entry, source = self._packed_chart(spec, label)
        elif spec.source and (self.repo_root / spec.source).is_dir():
            entry, source = self._packed_zipapp(spec, label)
        else:
            assert spec.source
            src = self.repo_root / spec.source
            fname = spec.filename or Path(spec.source).name
            expect = "sha256:" + spec.sha256 if spec.sha256 else None
            entry = self.store.add_file(fname, src, mode=spec.mode, expect_digest=expect)
            source = Source(path=spec.source, sha256=spec.sha256)
        self.progress(ProgressEvent("end", label))
        extra = {"images": spec.images} if isinstance(spec, ChartSpec) else {}
        return Artifact(
            name=spec.name,
            kind=kind,
            version=spec.version,
            size=entry.size,
            digest=entry.digest,
            test_only=spec.test_only,
            files=[entry],
            source=source,
            install_path=spec.install_path,
            role=spec.role if kind == "file" else None,
            kubernetes=spec.kubernetes if kind == "file" else None,
            **extra,
        )

    def _packed_from_deb(self, spec: FileSpec, label: str) -> tuple[FileEntry, Source]:
        """The tarball of a directory (or one file) of a package in this profile's apt repositories
        (built before)."""
        assert spec.from_deb
        deb = debdir.find_deb(
            [self.cache / "apt" / a.name for a in self.prof.apt], spec.from_deb.package, label
        )
        deb_sha = hash_file(deb)[0]
        if spec.from_deb.file:
            return self._file_from_deb(spec, deb, deb_sha, label)
        assert spec.from_deb.path and spec.filename  # the profile model requires both together
        # packed once per package file and directory: the same input makes the same bytes
        key = hashlib.sha256(f"{debdir.PACK_VERSION} {deb_sha} {spec.from_deb.path}".encode()).hexdigest()
        packed = self.cache / "from-deb" / key[:16] / spec.filename
        if not packed.is_file():
            packed.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(packed) as part:
                n = debdir.pack_deb_dir(deb, spec.from_deb.path, part, label)
            self.note(label, f"packed {n} files of /{spec.from_deb.path} from {deb.name}")
        entry = self.store.add_file(spec.filename, packed, mode=spec.mode)
        return entry, Source(deb=deb.name, path=spec.from_deb.path, sha256=deb_sha)

    def _file_from_deb(self, spec: FileSpec, deb: Path, deb_sha: str, label: str) -> tuple[FileEntry, Source]:
        """One file of the package, its bytes as the package has them (Debian's kubectl client)."""
        assert spec.from_deb and spec.from_deb.file
        member = spec.from_deb.file
        fname = spec.filename or Path(member).name
        out = self.cache / "from-deb" / deb_sha[:16] / "file" / member
        if not out.is_file():
            out.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(out) as part:
                debdir.extract_file(deb, member, part, label)
            self.note(label, f"took /{member} from {deb.name}")
        entry = self.store.add_file(fname, out, mode=spec.mode)
        return entry, Source(deb=deb.name, path=member, sha256=deb_sha)

    def _packed_zipapp(self, spec: FileSpec, label: str) -> tuple[FileEntry, Source]:
        """A package directory (a test stand-in) as one executable zipapp; same files, same bytes."""
        assert spec.source
        tool = Path(spec.install_path or spec.name).name
        data = zipapp.pack(self.repo_root / spec.source, label, zipapp.build_modules(tool, spec.version))
        fname = spec.filename or Path(spec.source).name
        packed = self.cache / "zipapp" / hashlib.sha256(data).hexdigest()[:16] / fname
        if not packed.is_file():
            packed.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(packed, data)
        expect = "sha256:" + spec.sha256 if spec.sha256 else None  # a pin holds for the packed bytes
        entry = self.store.add_file(fname, packed, mode=spec.mode, expect_digest=expect)
        return entry, Source(path=spec.source, sha256=spec.sha256, packed="zipapp")

    def _packed_chart(self, spec: FileSpec, label: str) -> tuple[FileEntry, Source]:
        """A test chart directory as the archive `helm package` would make; same files, same bytes."""
        assert spec.source
        src = self.repo_root / spec.source
        data = chartpack.pack(src, label)
        name, version = chartpack.chart_name(src, label)
        fname = spec.filename or f"{name}-{version}.tgz"
        packed = self.cache / "charts" / hashlib.sha256(data).hexdigest()[:16] / fname
        if not packed.is_file():
            packed.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(packed, data)
        expect = "sha256:" + spec.sha256 if spec.sha256 else None
        entry = self.store.add_file(fname, packed, mode=spec.mode, expect_digest=expect)
        return entry, Source(path=spec.source, sha256=spec.sha256, packed="chart")

    # -- images -------------------------------------------------------------------------------
    def image(self, spec: ImageSpec) -> Artifact:
        label = f"oci-image/{spec.name}"
        self.progress(ProgressEvent("start", label))
        if spec.build == "busybox":
            extra = self._archive_layer(spec, label)
            art = oci.store_local_image(
                self.store, spec.name, spec.reference, self._busybox(), spec.cmd, True, extra
            )
        else:
            art = self._reuse_image(spec) or self._pull_image(spec, label)
        self.progress(ProgressEvent("end", label))
        return art

    def _archive_layer(self, spec: ImageSpec, label: str) -> tuple[oci.Layer, str] | None:
        """The layer of a pinned wheel's or Debian package's files (the archive downloaded once and
        checked against its pin; the layer made once per archive and file list: gzip of tens of MB
        is the slow part)."""
        a = spec.add_from_wheel or spec.add_from_deb
        if a is None:
            return None
        what = f"{len(a.files)} files of {a.url.rsplit('/', 1)[-1]} (sha256 {a.sha256[:12]}...)"
        key = hashlib.sha256(json.dumps([a.sha256, a.files]).encode()).hexdigest()[:16]
        blob, diff = (
            self.cache / "wheel-layers" / key / "layer.tar.gz",
            self.cache / "wheel-layers" / key / "diff_id",
        )
        if not (blob.is_file() and diff.is_file()):
            got = fetch(self.opts.mirrors.url(a.url), a.sha256, self.cache / "files", label, self.progress)
            if spec.add_from_deb:
                layer = oci.files_layer(debdir.read_files(got, list(a.files), label), a.files)
            else:
                layer = oci.wheel_layer(got, a.files, label)
            blob.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(blob) as part:
                part.write_bytes(layer.blob)
            with atomic_path(diff) as part:
                part.write_text(layer.diff_id)
            self.note(label, f"layer of {what}")
        return oci.Layer(diff_id=diff.read_text(), blob=blob.read_bytes()), what

    def _busybox(self) -> str:
        bb = self.opts.busybox or shutil.which("busybox") or "/bin/busybox"
        return bb

    def _reuse_image(self, spec: ImageSpec) -> Artifact | None:
        if not self.previous:
            return None
        for a in self.previous.artifacts:
            if (
                a.kind == "oci-image"
                and a.name == spec.name
                and a.image
                and a.image.source_digest == spec.digest
                and a.image.reference == spec.reference
                and all(self.store.has(d, s) for f in a.files for d, s in f.blobs())
            ):
                for f in a.files:
                    self.store.mark(f)
                self.store.stats.skipped += len(a.files)
                return a
        return None

    def _pull_image(self, spec: ImageSpec, label: str) -> Artifact:
        if not shutil.which("skopeo"):
            raise BundleError(f"{label}: skopeo is needed to pull images", hint="apt-get install skopeo")
        layout = self.cache / "oci" / spec.name
        target = self.opts.mirrors.registry(oci.repository_of(spec.reference))
        src = f"docker://{target.repo}@{spec.digest}"  # pulling by digest makes skopeo enforce the pin
        shutil.rmtree(layout, ignore_errors=True)
        layout.mkdir(parents=True)
        cmd = ["skopeo", "copy", "--retry-times", "3", "--override-os", "linux", "--override-arch", "amd64"]
        if not target.tls_verify:
            cmd.append("--src-tls-verify=false")
        r = subprocess.run([*cmd, src, f"oci:{layout}:{spec.name}"], capture_output=True, text=True)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            gone = "manifest unknown" in r.stderr.lower()
            raise BundleError(
                f"{label}: skopeo copy {src} failed: {last}",
                hint="the locked digest is no longer served (did the tag move?): re-lock it and review"
                if gone
                else None,
            )
        art = oci.ingest_layout_image(
            self.store,
            layout,
            spec.name,
            spec.reference,
            ref_name=spec.name,
            source_digest=spec.digest,
        )
        want = self.pinned.platform_digests.get(spec.name)
        if want and art.image and art.image.manifest_digest != want:
            raise BundleError(
                f"{label}: the linux/amd64 manifest pulled is {art.image.manifest_digest}, "
                f"the lock records {want}",
                hint="the index was re-pushed with other content: re-lock it and review",
            )
        return art

    # -- wheels -------------------------------------------------------------------------------
    def wheels(self, spec: WheelSpec) -> list[Artifact]:
        label = f"wheel/{spec.name}"
        self.progress(ProgressEvent("start", label))
        wdir = self.cache / "wheels" / spec.name
        args = list(spec.requirements)
        project = content_root()  # the toolkit's own source tree, whatever repo_root says
        if spec.project:
            if not (project / "pyproject.toml").is_file():
                raise BundleError(
                    f"{label}: no pyproject.toml in {project}", hint="build from a source checkout"
                )
            args.insert(0, str(project))
        key = _wheel_key(project if spec.project else None, [*args, *spec.platforms, spec.python_version])
        stamp = wdir / ".stamp"
        if not (stamp.is_file() and stamp.read_text() == key):
            shutil.rmtree(wdir, ignore_errors=True)
            wdir.mkdir(parents=True)
            if spec.platforms:
                _download_for_platform(spec, project, wdir, label)
            else:
                _pip(label, "wheel", "--quiet", "--wheel-dir", str(wdir), *args)
            atomic_write(stamp, key.encode())
        arts = []
        for whl in sorted(wdir.glob("*.whl")):
            dist, version = whl.name.split("-")[:2]
            entry = self.store.add_file(whl.name, whl)
            arts.append(
                Artifact(
                    name=dist,
                    kind="wheel",
                    version=version,
                    size=entry.size,
                    digest=entry.digest,
                    files=[entry],
                )
            )
        self.progress(ProgressEvent("end", label))
        return arts

    # -- apt ----------------------------------------------------------------------------------
    def apt(self, spec) -> Artifact:
        label = f"apt-repo/{spec.name}"
        self.progress(ProgressEvent("start", label))
        repo = self.cache / "apt" / spec.name
        locked = self.pinned.apt.get(spec.name)
        if locked is not None:  # production: the exact packages the lock holds, each hash-checked
            self.note(label, f"downloading the {len(locked.debs)} locked packages (cached after)")
            self._apt_locked(locked, repo, label)
        else:  # the lab: its nodes' own Debian resolves the closure (incremental, stamped)
            self.note(label, "resolving the package closure (slow the first time, cached after)")
            base = rootfs.ensure_base_rootfs(self.cache / "rootfs")
            work = self.cache / "apt-work" / spec.name
            aptclosure.download_closure(base, spec.sources, list(spec.packages), repo, work)
        aptclosure.index_flat_repo(repo)
        self.signer.sign(repo, label)
        files: list[FileEntry] = []
        for p in sorted(repo.rglob("*")):
            if p.is_symlink():
                raise BundleError(f"{label}: {p} is a symlink; a bundle holds plain files only")
            if p.is_file() and not p.name.startswith("."):  # skip the resolver's own stamp
                files.append(self.store.add_file(p.relative_to(repo).as_posix(), p))
        self.progress(ProgressEvent("end", label))
        return Artifact(
            name=spec.name,
            kind="apt-repo",
            version=spec.codename,
            size=sum(f.size for f in files),
            digest=tree_digest(files),
            files=files,
            apt=AptInfo(
                distro=spec.distro,
                codename=spec.codename,
                arch=spec.arch,
                packages=spec.packages,
                signed_by=self.signer.fingerprint(),
                keyring=self.signer.public_key(),
            ),
        )

    def _apt_locked(self, locked: AptLock, repo: Path, label: str) -> None:
        from appliance_cli.debian import aptresolve

        debs = [aptresolve.LockedDeb(**d.model_dump()) for d in locked.debs]
        repo.mkdir(parents=True, exist_ok=True)
        keep = {Path(d.filename).name for d in debs}
        for old in repo.glob("*.deb"):  # a package the lock no longer holds
            if old.name not in keep:
                old.unlink()
        mirrors = self.opts.mirrors

        def fetch_to(url: str, dest: Path) -> None:  # the resolver checks size and sha256 itself
            download_to(mirrors.url(url), dest, label)

        try:
            aptresolve.download_locked(debs, repo, fetch_to)
        except aptresolve.AptResolveError as exc:  # it names the package; the entry is named here
            raise BundleError(f"{label}: {exc.message}", hint=exc.hint) from None


# pip's own framing around a failed build; the cause is the line it frames.
_PIP_FRAMING = ("error: subprocess-exited-with-error", "error: metadata-generation-failed")
_PIP_BOX = " \u2502\u2570\u2500>\u00d7"  # the box drawing pip indents a build's output with
_PIP_INDEX_TROUBLE = ("No matching distribution", "Could not find a version", "NewConnectionError", "Network")


def pip_failure_cause(stderr: str) -> tuple[str, str]:
    """(the line that says why pip failed, a hint). pip's last line is usually 'See above for
    details': the cause is its last `ERROR:` line, else the failing build's own `error:` line."""
    lines = [ln.strip(_PIP_BOX) for ln in stderr.splitlines()]
    own = [ln for ln in lines if ln.startswith("ERROR:")]
    build = [ln for ln in lines if ln.lower().startswith("error:") and ln not in _PIP_FRAMING]
    cause = (own or build or [ln for ln in lines if ln] or ["(no output)"])[-1]
    if any(t in stderr for t in _PIP_INDEX_TROUBLE):
        return cause, "PyPI (or a mirror) must be reachable and serve this package for the target platform"
    return cause, "pip could not build it: fix the cause named above (python -m pip shows the whole output)"


def _pip(label: str, *args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        cause, hint = pip_failure_cause(r.stderr)
        raise BundleError(f"{label}: pip {args[0]} failed: {cause}", hint=hint)


def project_dependencies(project: Path) -> list[str]:
    import tomllib

    return list(tomllib.loads((project / "pyproject.toml").read_text())["project"].get("dependencies", []))


def _download_for_platform(spec: WheelSpec, project: Path, wdir: Path, label: str) -> None:
    """Wheels for a controller that is not this host: the toolkit itself is pure Python (built
    here, --no-deps); every dependency must exist as a binary wheel for one of spec.platforms
    and spec.python_version (--only-binary: nothing is compiled for the wrong glibc)."""
    reqs = list(spec.requirements)
    if spec.project:
        _pip(label, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wdir), str(project))
        reqs = project_dependencies(project) + reqs
    if not reqs:
        return
    platforms = [arg for tag in spec.platforms for arg in ("--platform", tag)]
    _pip(
        label,
        "download",
        "--quiet",
        "--only-binary=:all:",
        "--dest",
        str(wdir),
        "--implementation",
        "cp",
        "--python-version",
        spec.python_version,
        *platforms,
        *reqs,
    )


def _wheel_key(project: Path | None, args: list[str]) -> str:
    h = hashlib.sha256(json.dumps([sys.version, args]).encode())
    if project is not None:
        # everything the wheel holds: the package (install-toolkit.sh included) and the content
        # pyproject.toml force-includes (roles, playbooks, ...), so the stick's toolkit is current
        for rel in ("pyproject.toml", "ansible.cfg"):
            if (project / rel).is_file():
                h.update(rel.encode() + b"\0" + (project / rel).read_bytes())
        for top in (
            "appliance_cli",
            "playbooks",
            "roles",
            "module_utils",
            "templates",
            "inventories",
            "bundles",
        ):
            for p in sorted((project / top).rglob("*")):
                if p.is_file() and "__pycache__" not in p.parts:
                    h.update(p.relative_to(project).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()
