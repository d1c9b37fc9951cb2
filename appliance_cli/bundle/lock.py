"""`bundle lock`: resolve a profile's intent into its lock, on the connected build host.

An entry already in the lock, whose identity still matches the profile, is never resolved again
unless named in `update` (a tag that moved since is news for a reviewer, not for a silent
re-pin). An entry locked by its index digest alone (a reviewed value) is completed with its
amd64 manifest digest by reading that digest, not the tag. `check` resolves everything again
and reports where upstream now differs from the lock, writing nothing.

An apt entry's indexes are read only through a Release file signed by one of the archive keys its
profile pins (`keyring:`): the keyring file must hash to the pinned sha256 and hold exactly the
pinned fingerprints, and a production profile has no entry without one (profile.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from appliance_cli.bundle import resolve
from appliance_cli.bundle.lockfile import (
    AptLock,
    DebLock,
    FileLock,
    ImageLock,
    Lock,
    load_lock,
    lock_path,
    write_lock,
)
from appliance_cli.bundle.mirrors import NO_MIRRORS, MirrorMap
from appliance_cli.bundle.pins import apt_identity, apt_keys
from appliance_cli.bundle.profile import AptSpec, ChartSpec, FileSpec, ImageSpec, Profile, load_profile
from appliance_cli.bundle.progress import ProgressEvent, ProgressFn, no_progress
from appliance_cli.content import content_root
from appliance_cli.debian.aptindex import TrustedKeys
from appliance_cli.debian.openpgp import KeyringFormatError, primary_fingerprints
from appliance_cli.errors import ApplianceError, BundleError, UsageError


@dataclass
class LockOptions:
    profile: str | Path
    mirrors: MirrorMap = NO_MIRRORS
    update: list[str] = field(default_factory=list)  # entry names to resolve again
    check: bool = False  # resolve everything again, report drift, write nothing
    cache: Path | None = None  # downloads land here as <cache>/files/<sha256> (build's cache)
    progress: ProgressFn = no_progress
    repo_root: Path | None = None  # where a profile's keyring paths are resolved (default: content root)


@dataclass
class LockResult:
    path: Path
    written: bool
    resolved: list[str] = field(default_factory=list)  # labels resolved by this run
    kept: list[str] = field(default_factory=list)  # labels already locked, left alone
    drift: list[str] = field(default_factory=list)  # check: one line per entry upstream changed
    methods: dict[str, int] = field(default_factory=dict)  # method -> entries, over the whole lock


def lock_profile(opts: LockOptions) -> LockResult:
    prof = load_profile(opts.profile)
    assert prof.source_path is not None
    path = lock_path(prof.source_path)
    old = load_lock(path, prof.name) or Lock(profile=prof.name)
    names = {label.split("/", 1)[1] for label, _ in prof.entries()}
    unknown = sorted(set(opts.update) - names)
    if unknown:
        raise UsageError(f"--update {unknown[0]}: no entry of that name in profile {prof.name}")
    cache = opts.cache or Path("/var/cache/appliance/bundle-lock")
    locker = _Locker(prof, old, opts, cache)
    new = locker.run()
    result = LockResult(path, False, locker.resolved, locker.kept, locker.drift)
    for section in ("files", "charts", "images", "apt"):
        for entry in getattr(new, section).values():
            result.methods[entry.method] = result.methods.get(entry.method, 0) + 1
    if not opts.check:
        result.written = write_lock(path, new)
    return result


class _Locker:
    def __init__(self, prof: Profile, old: Lock, opts: LockOptions, cache: Path):
        self.prof, self.old, self.opts, self.cache = prof, old, opts, cache
        self.resolved: list[str] = []
        self.kept: list[str] = []
        self.drift: list[str] = []

    def run(self) -> Lock:
        new = Lock(profile=self.prof.name)
        for spec in self.prof.files:
            if spec.url:
                new.files[spec.name] = self.file("files", spec)
        for chart in self.prof.charts:
            if chart.url:
                new.charts[chart.name] = self.file("charts", chart)
        for image in self.prof.images:
            if not image.build:
                new.images[image.name] = self.image(image)
        for apt in self.prof.apt:
            new.apt[apt.name] = self.apt(apt)
        return new

    def _wanted(self, label: str, name: str, current, matches: bool) -> bool:
        """True: resolve this entry now. Otherwise it is kept as locked."""
        if current is not None and matches and name not in self.opts.update and not self.opts.check:
            self.kept.append(label)
            return False
        self.opts.progress(ProgressEvent("start", label))
        return True

    def _drift(self, label: str, current, fresh, what: str) -> None:
        if self.opts.check:
            if current is None:
                self.drift.append(f"{label}: not in the lock")
            elif what:
                self.drift.append(f"{label}: {what}")
        self.resolved.append(label)
        self.opts.progress(ProgressEvent("end", label))

    def file(self, section: str, spec: FileSpec) -> FileLock:
        label = f"{section}/{spec.name}"
        current = self.old.files.get(spec.name) if section == "files" else self.old.charts.get(spec.name)
        matches = current is not None and (current.url, current.version) == (spec.url, spec.version)
        if not self._wanted(label, spec.name, current, matches):
            assert current is not None
            return current
        if isinstance(spec, ChartSpec):
            fresh = resolve.resolve_chart(spec, self.opts.mirrors, self.cache, label)
        else:
            fresh = resolve.resolve_file(spec, self.opts.mirrors, self.cache, label)
        what = ""
        if current is not None and current.sha256 != fresh.sha256:
            what = f"upstream's {spec.url} now has sha256 {fresh.sha256}, the lock holds {current.sha256}"
        self._drift(label, current, fresh, what)
        return current if self.opts.check and current is not None else fresh

    def image(self, spec: ImageSpec) -> ImageLock:
        label = f"images/{spec.name}"
        current = self.old.images.get(spec.name)
        matches = current is not None and current.reference == spec.reference
        reviewed_by_index = current is not None and matches and not current.platform_digest
        if reviewed_by_index and not self.opts.check and spec.name not in self.opts.update:
            assert current is not None  # read the locked index digest only, never the tag
            self.resolved.append(label)
            return resolve.complete_image(current, self.opts.mirrors, label)
        if not self._wanted(label, spec.name, current, matches):
            assert current is not None
            return current
        fresh = resolve.resolve_image(spec, self.opts.mirrors, label)
        what = ""
        if current is not None and current.digest != fresh.digest:
            what = (
                f"{spec.reference} now resolves to {fresh.digest}, the lock holds {current.digest} "
                "(the tag moved after locking)"
            )
        self._drift(label, current, fresh, what)
        return current if self.opts.check and current is not None else fresh

    def apt(self, spec: AptSpec) -> AptLock:
        label = f"apt/{spec.name}"
        current = self.old.apt.get(spec.name)
        sources, arch, packages = apt_identity(spec)
        matches = current is not None and (
            current.sources.strip(),
            current.arch,
            current.packages,
            current.verified_with,
        ) == (sources, arch, packages, apt_keys(spec))
        if not self._wanted(label, spec.name, current, matches):
            assert current is not None
            return current
        keys = archive_keys(spec, self.opts.repo_root or content_root(), label, self.prof.production)
        fresh = _resolve_apt(spec, self.opts.mirrors, label, keys)
        what = ""
        if current is not None and current.debs != fresh.debs:
            changed = sorted({d.name for d in fresh.debs} ^ {d.name for d in current.debs}) or sorted(
                {f"{d.name} {d.version}" for d in fresh.debs}
                - {f"{d.name} {d.version}" for d in current.debs}
            )
            what = f"the mirror's index now differs from the lock ({', '.join(changed[:3])})"
        self._drift(label, current, fresh, what)
        return current if self.opts.check and current is not None else fresh


KEYRING_HINT = (
    "check where the keyring came from (bundles/keyrings/README.md) before pinning anything new: "
    "the keyring and its fingerprints are what every locked .deb is trusted through"
)


def archive_keys(spec: AptSpec, repo_root: Path, label: str, production: bool) -> TrustedKeys | None:
    """The keys `spec`'s Release files must be signed by: its keyring file, checked against the
    sha256 and the fingerprints the profile pins. None only for a test profile naming no keyring."""
    ring = spec.keyring
    if ring is None:
        if production:  # profile.py refuses this already; never lock a production closure unchecked
            raise BundleError(f"{label}: a production profile's apt entry names no keyring")
        return None
    path = repo_root / ring.path
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BundleError(
            f"{label}: keyring {ring.path}: cannot read it ({exc.strerror})", hint=KEYRING_HINT
        ) from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != ring.sha256:
        raise BundleError(
            f"{label}: keyring {ring.path} has sha256 {actual}, the profile pins {ring.sha256}",
            hint=KEYRING_HINT,
        )
    try:
        found = primary_fingerprints(data)
    except KeyringFormatError as exc:
        raise BundleError(f"{label}: keyring {ring.path}: {exc}", hint=KEYRING_HINT) from None
    pinned = set(ring.fingerprints)
    extra, missing = sorted(set(found) - pinned), sorted(pinned - set(found))
    if extra or missing:
        what = [f"holds key {', '.join(extra)}, which the profile does not pin"] if extra else []
        what += [f"lacks pinned key {', '.join(missing)}"] if missing else []
        raise BundleError(f"{label}: keyring {ring.path} {' and '.join(what)}", hint=KEYRING_HINT)
    return TrustedKeys(path, frozenset(pinned))


def _resolve_apt(spec: AptSpec, mirrors: MirrorMap, label: str, keys: TrustedKeys | None) -> AptLock:
    from appliance_cli.bundle.fetch import fetch_bytes
    from appliance_cli.debian import aptresolve

    try:
        debs = aptresolve.resolve_closure(
            spec.sources,
            list(spec.packages),
            spec.arch,
            lambda url: fetch_bytes(mirrors.url(url), label),
            keyring=keys,
        )
    except BundleError:
        raise
    except ApplianceError as exc:  # the resolver's own errors name the package; add the entry
        raise BundleError(f"{label}: {exc.message}", hint=exc.hint) from None
    sources, arch, packages = apt_identity(spec)
    return AptLock(
        sources=sources + "\n",
        arch=arch,
        packages=packages,
        verified_with=apt_keys(spec),
        resolved_at=resolve.now(),
        debs=[DebLock(**vars(d)) for d in debs],
    )
