"""Join a profile with its lock: every entry `bundle build` fetches gets the bytes it must be.

A production profile is pinned by its lock only (an inline pin there is refused: one source of
truth, reviewed as a lock diff). A test profile may pin inline; where it also has a lock entry,
the lock wins. An entry whose identity (url + version, image reference, apt sources + packages)
differs from its lock entry is stale: the build refuses it rather than fetch something else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from appliance_cli.bundle.lockfile import AptLock, FileLock, ImageLock, Lock
from appliance_cli.bundle.profile import AptSpec, ChartSpec, FileSpec, ImageSpec, Profile
from appliance_cli.errors import BundleError

_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass
class Pinned:
    """The profile with every sha256/digest filled in, and what only the lock knows."""

    profile: Profile
    apt: dict[str, AptLock] = field(default_factory=dict)  # locked closures (production apt)
    platform_digests: dict[str, str] = field(default_factory=dict)  # image name -> amd64 manifest


def apt_identity(spec: AptSpec) -> tuple[str, str, list[str]]:
    return spec.sources.strip(), spec.arch, sorted(set(spec.packages))


def apt_keys(spec: AptSpec) -> list[str] | None:
    """The archive keys a lock entry of `spec` must have been verified with (AptLock.verified_with)."""
    return sorted(spec.keyring.fingerprints) if spec.keyring else None


def update_hint(prof: Profile, name: str) -> str:
    return f"run `appliance bundle lock --profile {prof.name} --update {name}` and review the lock diff"


def pin_problems(prof: Profile, lock: Lock | None) -> list[str]:
    """One line per entry that cannot be built as pinned (none: pin_profile succeeds)."""
    return _join(prof, lock)[1]


def pin_profile(prof: Profile, lock: Lock | None) -> Pinned:
    pinned, problems = _join(prof, lock)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        hint = (
            f"run `appliance bundle lock --profile {prof.name}` on the connected build host"
            if lock is None or "not in the lock" in problems[0]
            else "re-lock the entry named, then review the lock diff"
        )
        raise BundleError(f"profile {prof.name}: {problems[0]}{more}", hint=hint)
    return pinned


def _join(prof: Profile, lock: Lock | None) -> tuple[Pinned, list[str]]:
    problems: list[str] = []
    files = [_pin_file(prof, lock, "files", s, problems) for s in prof.files]
    charts = [_pin_file(prof, lock, "charts", s, problems) for s in prof.charts]
    pinned = Pinned(prof)
    images = [_pin_image(prof, lock, s, problems, pinned) for s in prof.images]
    for spec in prof.apt:
        _pin_apt(prof, lock, spec, problems, pinned)
    pinned.profile = prof.model_copy(update={"files": files, "charts": charts, "images": images})
    return pinned, problems


def _inline_refused(prof: Profile, label: str, attr: str, value: str | None, problems: list[str]) -> bool:
    if prof.production and value is not None:
        problems.append(f"{label}: an inline {attr} in a production profile (its pins live in the lock)")
        return True
    return False


def _pin_file(prof: Profile, lock: Lock | None, section: str, spec: FileSpec, problems: list[str]):
    label = f"{section}/{spec.name}"
    if not spec.url or _inline_refused(prof, label, "sha256", spec.sha256, problems):
        return spec  # local sources are hashed as built
    entry = lock.entry(section, spec.name) if lock else None
    if isinstance(entry, FileLock):
        if (entry.url, entry.version) != (spec.url, spec.version):
            problems.append(
                f"{label}: the lock holds {entry.url} ({entry.version}), the profile asks for "
                f"{spec.url} ({spec.version}); {update_hint(prof, spec.name)}"
            )
            return spec
        return spec.model_copy(update={"sha256": entry.sha256})
    if spec.sha256 is None or prof.production:
        problems.append(f"{label}: not in the lock")
    elif not _HEX64.fullmatch(spec.sha256):
        problems.append(f"{label}: sha256 {spec.sha256!r} is not 64 hex digits")
    return spec


def _pin_image(prof: Profile, lock: Lock | None, spec: ImageSpec, problems: list[str], pinned: Pinned):
    label = f"images/{spec.name}"
    if spec.build or _inline_refused(prof, label, "digest", spec.digest, problems):
        return spec
    entry = lock.entry("images", spec.name) if lock else None
    if isinstance(entry, ImageLock):
        if entry.reference != spec.reference:
            problems.append(
                f"{label}: the lock holds {entry.reference}, the profile asks for {spec.reference}; "
                f"{update_hint(prof, spec.name)}"
            )
            return spec
        if entry.platform_digest:
            pinned.platform_digests[spec.name] = entry.platform_digest
        return spec.model_copy(update={"digest": entry.digest})
    if spec.digest is None or prof.production:
        problems.append(f"{label}: not in the lock")
    elif not re.fullmatch(r"sha256:[0-9a-f]{64}", spec.digest):
        problems.append(f"{label}: digest {spec.digest!r} is not sha256:<64 hex>")
    return spec


def _pin_apt(prof: Profile, lock: Lock | None, spec: AptSpec, problems: list[str], pinned: Pinned) -> None:
    entry = lock.entry("apt", spec.name) if lock else None
    if isinstance(entry, AptLock):
        if (entry.sources.strip(), entry.arch, entry.packages) != apt_identity(spec):
            problems.append(
                f"apt/{spec.name}: its sources or package list changed since it was locked; "
                f"{update_hint(prof, spec.name)}"
            )
            return
        keys = apt_keys(spec)
        if entry.verified_with != keys:
            if entry.verified_with is None:
                how = "without checking its archive's signatures; the profile pins keys for it"
            elif keys is None:
                how = "with archive keys the profile no longer names"
            else:
                how = "with other archive keys than the profile pins"
            problems.append(f"apt/{spec.name}: locked {how}; {update_hint(prof, spec.name)}")
            return
        pinned.apt[spec.name] = entry
    elif prof.production:
        problems.append(f"apt/{spec.name}: not in the lock")


def chart_or_file(spec: FileSpec) -> str:
    return "charts" if isinstance(spec, ChartSpec) else "files"
