"""The lock: what a profile's intent resolved to, written by `bundle lock`, read by `bundle build`.

A profile states intent (URLs, versions, tags); `<profile>.lock.yml` next to it records, per
entry, the bytes that intent meant when it was locked, and how that was established:

  published   the download matched the checksum upstream publishes next to it (checksum_url)
  helm-index  the chart matched the digest in its helm repository's index.yaml (index_url)
  registry    the tag resolved with skopeo on the build host: the index (or manifest) digest,
              plus the linux/amd64 manifest digest
  index       apt: exact versions, sizes and sha256 from the mirror's Packages index, listed by a
              Release file signed by one of the profile's pinned archive keys (verified_with)
  reviewed    copied from an independent published source after review (`source` names it:
              kubespray checksum tables, Kubernetes promoter manifests, ...; see PINS.md)
  tofu        trust on first use: nothing published to compare with; hashed as downloaded

An entry is valid for a profile entry only while its identity (url + version, image reference,
apt sources + package list) is unchanged; anything else is `bundle lock --update NAME`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from appliance_cli import yamlfile
from appliance_cli.bundle.model import atomic_write, field_path
from appliance_cli.errors import BundleError

LOCK_VERSION = 1
_HEX64 = r"^[0-9a-f]{64}$"
_DIGEST = r"^sha256:[0-9a-f]{64}$"
HEADER = (
    "# Written by `appliance bundle lock` from the profile next to it: what each entry resolved to\n"
    "# and how that was established (method). Review its diff like code; do not edit by hand.\n"
)
Method = Literal["published", "helm-index", "registry", "index", "reviewed", "tofu"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileLock(_Strict):
    """A file or a chart."""

    url: str
    version: str | None = None
    sha256: str = Field(pattern=_HEX64)
    size: int | None = Field(default=None, ge=0)
    method: Method
    checksum_url: str | None = None  # published: where the checksum was read
    index_url: str | None = None  # helm-index: the repository's index.yaml
    source: str | None = None  # reviewed: the independent source, in words
    resolved_at: str | None = None


class ImageLock(_Strict):
    reference: str
    digest: str = Field(pattern=_DIGEST)  # what the tag pointed at: an index, or one manifest
    platform_digest: str | None = Field(default=None, pattern=_DIGEST)  # the linux/amd64 manifest
    media_type: str | None = None
    method: Method
    source: str | None = None
    resolved_at: str | None = None


class DebLock(_Strict):
    name: str
    version: str
    arch: str
    filename: str  # the index's Filename: (pool path under `base`)
    sha256: str = Field(pattern=_HEX64)
    size: int = Field(ge=0)
    base: str  # the archive's base URL as the sources line writes it
    suite: str
    component: str


class AptLock(_Strict):
    sources: str
    arch: str
    packages: list[str]  # what the profile asked for (sorted)
    method: Method = "index"
    # the pinned primary-key fingerprints (sorted) every suite's Release was checked against: each
    # carried a good signature by one of them. None: locked without checking (test profiles only)
    verified_with: list[str] | None = None
    resolved_at: str | None = None
    debs: list[DebLock]


class Lock(_Strict):
    lock_version: Literal[1] = 1
    profile: str
    files: dict[str, FileLock] = {}
    charts: dict[str, FileLock] = {}
    images: dict[str, ImageLock] = {}
    apt: dict[str, AptLock] = {}

    def entry(self, section: str, name: str) -> FileLock | ImageLock | AptLock | None:
        return getattr(self, section).get(name)

    def count(self) -> int:
        return sum(len(getattr(self, s)) for s in ("files", "charts", "images", "apt"))


def lock_path(profile_path: Path) -> Path:
    """appliance-k8s1.23.yml -> appliance-k8s1.23.lock.yml, next to it."""
    return profile_path.with_name(f"{profile_path.stem}.lock.yml")


def load_lock(path: Path, profile: str) -> Lock | None:
    """The lock at `path`, or None when there is none. A malformed lock is an error naming it."""
    try:
        data = yamlfile.read(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BundleError(f"lock {path}: cannot read it: {exc.strerror or exc}") from None
    except yamlfile.YamlError as exc:
        raise BundleError(f"lock {path}: cannot read it: {exc}") from None
    try:
        lock = Lock.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise BundleError(
            f"lock {path}: {field_path(e['loc'], '/')}{e['msg']}",
            hint="re-create it with `appliance bundle lock`",
        ) from None
    if lock.profile != profile:
        raise BundleError(
            f"lock {path} is for profile {lock.profile!r}, not {profile!r}",
            hint="each profile has its own <name>.lock.yml next to it",
        )
    return lock


def dump_lock(lock: Lock) -> bytes:
    data = lock.model_dump(mode="json", exclude_none=True)
    body = yaml.safe_dump(data, sort_keys=False, width=120, default_flow_style=False)
    return (HEADER + "---\n" + body).encode()


def write_lock(path: Path, lock: Lock) -> bool:
    """Write atomically; False (and nothing written) when the content is unchanged."""
    data = dump_lock(lock)
    if path.is_file() and path.read_bytes() == data:
        return False
    atomic_write(path, data)
    return True
