"""Resolve an apt package closure in pure Python, on the build host, without the target OS, and
download exactly what was resolved: the `bundle lock` side of the production (Ubuntu) apt repo.

Rules (apt's defaults where apt has one; bundles/README.md, "The apt closure"):
* candidate: for each name the highest version across every source (apt's rule when no pin is
  set: all sources have priority 500). Equal versions: the first source in the sources text wins.
  A package asked for as `name=version` (apt-get's syntax) takes exactly that version instead.
* Depends and Pre-Depends are followed; Recommends, Suggests, Conflicts and Breaks are not (as
  `apt-get install --no-install-recommends`; apt on the node still checks conflicts).
* `a (>= 1) | b`: a clause some chosen or installed package already meets needs nothing; else
  single-choice clauses are resolved first, then each alternative clause takes its first
  alternative that has a fitting candidate (the real package, else a provider, preferring higher
  Priority, then the name). A versioned dependency is met by a versioned Provides only.
* `:any` needs a Multi-Arch: allowed or foreign package; `:native` and `:ARCH` the target's arch.
* assumed installed (never locked unless asked for by name): by default every package the index
  marks `Essential: yes` or `Priority: required`, at its candidate version (ESSENTIAL_AND_REQUIRED).
  The risk: a node whose base system is older than the index (focal's release vs focal-updates)
  may lack the newer libc6 a locked package needs, and apt on site then fails. Pass the node
  image's `dpkg` status (`installed_from_dpkg_status`) as `assume_installed` to close that gap:
  a package installed at too old a version is then locked as an upgrade.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache, cmp_to_key
from pathlib import Path
from typing import Any

from debian.deb822 import Deb822, PkgRelation
from debian.debian_support import version_compare

from appliance_cli.debian.aptindex import (
    AptResolveError,
    Candidate,
    Fetch,
    IndexFile,
    Keyring,
    load_candidates,
)
from appliance_cli.digest import sha256_file
from appliance_cli.fsutil import atomic_path

ESSENTIAL_AND_REQUIRED = "essential+required"
AssumeInstalled = str | Mapping[str, str | None] | Iterable[str]
PRIORITY_RANK = {"required": 0, "important": 1, "standard": 2, "optional": 3, "extra": 4}
OPS: dict[str, Callable[[int], bool]] = {
    "<<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
    "=": lambda c: c == 0,
    ">=": lambda c: c >= 0,
    ">>": lambda c: c > 0,
}
NAME_HINT = "check the package name and the profile's apt sources (suites, components, arch)"


@dataclass(frozen=True)
class LockedDeb:
    """One package of a resolved closure, as a lock file records it."""

    name: str
    version: str
    arch: str
    filename: str  # the index's Filename: (pool path, relative to the archive base)
    sha256: str
    size: int
    base: str  # archive base URL as written in the sources line (no trailing /)
    suite: str
    component: str

    @property
    def url(self) -> str:
        return f"{self.base}/{self.filename.removeprefix('./')}"


@cache
def relations(text: str) -> list[list[Any]]:
    return PkgRelation.parse_relations(text) if text.strip() else []


def version_ok(version: str | None, constraint: tuple[str, str] | None) -> bool:
    """Does `version` meet `(op, version)`? An unversioned provider (None) meets no constraint."""
    if constraint is None:
        return True
    if version is None:
        return False
    op, want = constraint
    return OPS[op](version_compare(version, want))


def _fmt(alt: dict[str, Any]) -> str:
    qual = f":{alt['archqual']}" if alt.get("archqual") else ""
    ver = f" ({alt['version'][0]} {alt['version'][1]})" if alt.get("version") else ""
    return f"{alt['name']}{qual}{ver}"


def installed_from_dpkg_status(text: str) -> dict[str, str]:
    """name -> version of what a dpkg status file (/var/lib/dpkg/status) records as installed."""
    out = {}
    for para in Deb822.iter_paragraphs(text.splitlines(keepends=True), use_apt_pkg=False):
        if para.get("Status", "").endswith(" installed") and "Package" in para:
            out[para["Package"]] = para["Version"]
    return out


def split_pins(packages: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """`name=version` (apt-get's syntax for an exact version) -> the names, and name -> version."""
    names, pins = [], {}
    for p in packages:
        name, sep, version = p.partition("=")
        names.append(name)
        if sep:
            pins[name] = version
    return names, pins


class Universe:
    """The candidates (highest version per name, or the pinned one) and, per virtual name, who
    provides it."""

    def __init__(self, candidates: Iterable[Candidate], pins: Mapping[str, str] | None = None):
        self.best: dict[str, Candidate] = {}
        versions: dict[str, list[Candidate]] = {}
        for c in candidates:
            versions.setdefault(c.name, []).append(c)
            old = self.best.get(c.name)
            if old is None or version_compare(c.version, old.version) > 0:
                self.best[c.name] = c
        for name, want in (pins or {}).items():
            exact = [c for c in versions.get(name, []) if version_compare(c.version, want) == 0]
            if not exact:
                have = sorted({c.version for c in versions.get(name, [])}, key=cmp_to_key(version_compare))
                raise AptResolveError(
                    f"package {name}={want}: no such version in the index (it has: {', '.join(have) or 'none'})",
                    hint="pin a version the profile's apt sources carry, or drop the pin",
                )
            self.best[name] = exact[0]  # the first source line's, as for equal versions
        self.providers: dict[str, list[tuple[Candidate, str | None]]] = {}
        for c in sorted(self.best.values(), key=lambda c: c.name):
            for name, version in provided_by(c):
                self.providers.setdefault(name, []).append((c, version))

    def where(self) -> str:
        suites = {f"{c.index.source.suite} {c.index.component}".strip() for c in self.best.values()}
        return ", ".join(sorted(suites)) or "empty indexes"


def provided_by(c: Candidate) -> list[tuple[str, str | None]]:
    return [
        (alt["name"], alt["version"][1] if alt["version"] else None)
        for cl in relations(c.provides)
        for alt in cl
    ]


def base_system(universe: Universe, arch: str) -> list[Candidate]:
    """What a minimal install of the index surely has: every Essential or Priority: required
    package and their dependencies (as mmdebstrap's `required` variant), except where a clause
    leaves a choice (`a | b`, a virtual name): an underestimate only makes the bundle larger, an
    overestimate would leave a node without a package. Debian since bookworm marks libc6 and most
    libraries optional: they are in the base only as dependencies of the required set."""
    seeds = sorted(c.name for c in universe.best.values() if c.essential or c.priority == "required")
    return Resolver(universe, {}, arch, certain_only=True).run(seeds)


def assumed_set(
    universe: Universe, assume: AssumeInstalled, extra: Iterable[str], arch: str
) -> dict[str, str | None]:
    """name -> installed version (None: a version the caller did not state, taken to fit)."""
    if isinstance(assume, str):
        if assume != ESSENTIAL_AND_REQUIRED:
            raise AptResolveError(f"unknown assume_installed rule {assume!r}", hint=ESSENTIAL_AND_REQUIRED)
        out: dict[str, str | None] = {c.name: c.version for c in base_system(universe, arch)}
    elif isinstance(assume, Mapping):
        out = dict(assume)
    else:
        out = dict.fromkeys(assume)
    for name in extra:
        out.setdefault(name, None)
    return out


class Resolver:
    """Greedy, deterministic closure: what `packages` need that `assumed` does not already meet."""

    def __init__(
        self, universe: Universe, assumed: dict[str, str | None], arch: str, certain_only: bool = False
    ):
        self.u, self.assumed, self.arch = universe, assumed, arch
        self.certain_only = certain_only  # follow only dependencies with one way to meet them
        self.chosen: dict[str, Candidate] = {}
        self.parent: dict[str, str | None] = {}
        self.queue: deque[str] = deque()
        self.deferred: deque[tuple[str, str, list[dict[str, Any]]]] = deque()
        # virtual name -> (provider, provided version) among the assumed and the chosen
        self.provided: dict[str, list[tuple[Candidate | None, str | None]]] = {}
        for name in assumed:
            if name in universe.best:
                self._note_provides(universe.best[name])

    def _note_provides(self, c: Candidate) -> None:
        for name, version in provided_by(c):
            self.provided.setdefault(name, []).append((c, version))

    def _add(self, c: Candidate, parent: str | None) -> None:
        self.chosen[c.name], self.parent[c.name] = c, parent
        self._note_provides(c)
        self.queue.append(c.name)

    def chain(self, name: str | None) -> str:
        names: list[str] = []
        while name is not None:
            names.append(name)
            name = self.parent.get(name)
        return " -> ".join(reversed(names))

    def qual_ok(self, c: Candidate, archqual: str | None) -> bool:
        if archqual == "any":
            return c.multi_arch in ("allowed", "foreign")
        return archqual in (None, "native", self.arch) and c.arch in (self.arch, "all")

    def arch_applies(self, alt: dict[str, Any]) -> bool:
        """A `[amd64]` / `[!i386]` restriction (build relations; kept for completeness)."""
        rs = alt.get("arch") or []
        if not rs:
            return True
        wanted = [r.arch for r in rs if r.enabled]
        return self.arch in wanted if wanted else self.arch not in [r.arch for r in rs]

    def satisfied(self, alt: dict[str, Any]) -> bool:
        """Does a chosen or assumed-installed package (or what it provides) meet `alt`?"""
        name, constraint, qual = alt["name"], alt["version"], alt.get("archqual")
        c = self.chosen.get(name)
        if c is not None and self.qual_ok(c, qual) and version_ok(c.version, constraint):
            return True
        if name in self.assumed and (
            self.assumed[name] is None or version_ok(self.assumed[name], constraint)
        ):
            return True
        return any(
            (p is None or self.qual_ok(p, qual)) and version_ok(v, constraint)
            for p, v in self.provided.get(name, [])
        )

    def pick(self, alt: dict[str, Any]) -> Candidate | None:
        """The candidate that would meet `alt`: the real package, else the best provider."""
        name, constraint, qual = alt["name"], alt["version"], alt.get("archqual")
        c = self.u.best.get(name)
        if c is not None and self.qual_ok(c, qual) and version_ok(c.version, constraint):
            return c
        fits = [
            p
            for p, v in self.u.providers.get(name, [])
            if self.qual_ok(p, qual) and version_ok(v, constraint)
        ]
        fits.sort(key=lambda p: (PRIORITY_RANK.get(p.priority, 5), p.name))
        return fits[0] if fits else None

    def why_not(self, alt: dict[str, Any]) -> str:
        name = alt["name"]
        c = self.u.best.get(name)
        if c is not None:
            return f"the candidate is {name} {c.version} ({c.arch}, Multi-Arch: {c.multi_arch})"
        provs = [f"{p.name} ({v or 'unversioned'})" for p, v in self.u.providers.get(name, [])]
        if provs:
            return f"{name} is virtual, provided by {', '.join(provs)}: none fits"
        return f"no package or provider named {name} in {self.u.where()}"

    def clause(self, owner: str, field: str, alts: list[dict[str, Any]], defer: bool) -> None:
        alts = [a for a in alts if self.arch_applies(a)]
        if not alts or any(self.satisfied(a) for a in alts):
            return
        if self.certain_only and (len(alts) > 1 or alts[0]["name"] not in self.u.best):
            return
        if defer and len(alts) > 1:
            self.deferred.append((owner, field, alts))
            return
        for alt in alts:
            c = self.pick(alt)
            if c is not None and c.name not in self.chosen:
                self._add(c, owner)
                return
        text = " | ".join(_fmt(a) for a in alts)
        raise AptResolveError(
            f"cannot resolve {self.chain(owner)} -> {field} '{text}': "
            + "; ".join(dict.fromkeys(self.why_not(a) for a in alts)),
            hint=NAME_HINT,
        )

    def request(self, name: str) -> None:
        """A package asked for by name is locked even when assumed installed; a virtual name needs
        exactly one provider (apt's rule on the command line)."""
        if name in self.chosen:
            return
        c = self.u.best.get(name)
        if c is None:
            provs = sorted({p.name for p, _ in self.u.providers.get(name, [])})
            if len(provs) != 1:
                raise AptResolveError(
                    f"package {name!r} is virtual, provided by {', '.join(provs)}: name one of them"
                    if provs
                    else f"no package {name!r} in {self.u.where()} for {self.arch}",
                    hint=NAME_HINT,
                )
            c = self.u.best[provs[0]]
            if c.name in self.chosen:
                return
        self._add(c, None)

    def run(self, packages: Iterable[str]) -> list[Candidate]:
        for name in packages:
            self.request(name)
        while self.queue or self.deferred:
            if self.queue:
                c = self.chosen[self.queue.popleft()]
                for field, text in (("Pre-Depends", c.pre_depends), ("Depends", c.depends)):
                    for alts in relations(text):
                        self.clause(c.name, field, alts, defer=True)
            else:
                self.clause(*self.deferred.popleft(), defer=False)
        return sorted(self.chosen.values(), key=lambda c: (c.name, c.arch))


def locked(c: Candidate) -> LockedDeb:
    src = c.index.source
    return LockedDeb(
        c.name, c.version, c.arch, c.filename, c.sha256, c.size, src.base, src.suite, c.index.component
    )


def resolve_closure(
    sources: str,
    packages: list[str],
    arch: str,
    fetch: Fetch,
    assume_installed: AssumeInstalled = ESSENTIAL_AND_REQUIRED,
    *,
    extra_installed: Iterable[str] = (),
    keyring: Keyring | None = None,
    indexes_out: list[IndexFile] | None = None,
) -> list[LockedDeb]:
    """Every package `packages` need on `arch` that the target does not have, sorted by name.
    A `name=version` entry takes that exact version (AptResolveError naming the versions there are).

    `assume_installed`: ESSENTIAL_AND_REQUIRED (the index's Essential/required packages), or the
    target's installed packages (name -> version, e.g. `installed_from_dpkg_status`, or bare
    names); `extra_installed` adds names to either. `keyring`: check each InRelease/Release with
    gpgv against it (a `TrustedKeys`: only a signature by one of its pinned fingerprints counts). `indexes_out` receives the Packages files read (url, sha256, Release sha256).
    """
    indexes, candidates = load_candidates(sources, arch, fetch, keyring)
    if indexes_out is not None:
        indexes_out += indexes
    names, pins = split_pins(packages)
    universe = Universe(candidates, pins)
    resolver = Resolver(universe, assumed_set(universe, assume_installed, extra_installed, arch), arch)
    return [locked(c) for c in resolver.run(names)]


def _have(path: Path, deb: LockedDeb) -> bool:
    return path.is_file() and sha256_file(path) == (deb.sha256, deb.size)


def _fetch_checked(deb: LockedDeb, part: Path, fetch_to: Callable[[str, Path], None]) -> None:
    try:
        fetch_to(deb.url, part)
    except Exception as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise AptResolveError(
            f"cannot fetch {deb.name} {deb.version} ({deb.url}): {detail}",
            hint="is the mirror reachable, and does it still carry the locked version? (re-run bundle lock)",
        ) from exc
    actual, size = sha256_file(part) if part.is_file() else ("(nothing written)", 0)
    if (actual, size) != (deb.sha256, deb.size):
        raise AptResolveError(
            f"{deb.name} {deb.version}: {deb.url} has sha256 {actual} ({size} bytes); "
            f"the index says {deb.sha256} ({deb.size} bytes)",
            hint="the mirror serves another file than its index listed: check the mirror, or re-run bundle lock",
        )


def download_locked(debs: list[LockedDeb], dest: Path, fetch_to: Callable[[str, Path], None]) -> list[Path]:
    """Fetch each locked .deb from `base/filename` into dest (its pool file name), checked against
    the lock's size and sha256; written beside it (fsutil.atomic_path) and renamed in once checked,
    so dest never holds a partial or unchecked file. A file already there with the locked sha256 is not fetched again."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for deb in debs:
        target = dest / os.path.basename(deb.filename)
        out.append(target)
        if _have(target, deb):
            continue
        with atomic_path(target) as part:
            _fetch_checked(deb, part, fetch_to)
    return out
