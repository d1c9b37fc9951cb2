"""The bundle's on-disk format: constants, the manifest model, and atomic manifest I/O.

manifest.json is read on site by stdlib-only Python (the Ansible roles), so it stays plain JSON
with a flat, documented shape (bundles/README.md, bundles/manifest.schema.json)."""

from __future__ import annotations

import errno
import hashlib
import json
import re
from pathlib import Path, PurePosixPath
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from appliance_cli.errors import BundleError
from appliance_cli.fsutil import atomic_write as replace_file
from appliance_cli.fsutil import read_regular
from appliance_cli.fsutil import write_if_changed as replace_if_changed

SCHEMA: Final = "appliance-bundle"
SCHEMA_VERSION: Final = 1
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
OCI_LAYOUT = "oci-layout"
OCI_INDEX = "index.json"
INSTALL_SCRIPT: Final = "install-toolkit.sh"  # at the root, run from the stick to install the toolkit
BLOB_DIR = "blobs/sha256"
STAGING = ".staging"  # half-written blobs live here, never under blobs/
OCI_LAYOUT_BYTES = b'{"imageLayoutVersion":"1.0.0"}'
# FAT32 caps a file at 4 GiB - 1; stay well below so a blob never hits it.
FAT32_MAX = 4 * 1024**3 - 1
DEFAULT_CHUNK_SIZE = 2 * 1024**3
# No file is larger (off_t): a bigger size in a manifest is an error, not a number to add up (a
# 4,000-digit size overflowed the float arithmetic of `bundle inspect`)
MAX_SIZE = 2**63 - 1
KINDS = ("apt-repo", "file", "oci-image", "helm-chart", "wheel")
Kind = Literal["apt-repo", "file", "oci-image", "helm-chart", "wheel"]
CONTROLLER_RUNTIME = "controller-runtime"  # role of the Python the toolkit runs on (a `file`)
Role = Literal["controller-runtime"]

DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def hex_of(digest: str) -> str:
    return digest.split(":", 1)[1]


def check_digest(value: str) -> str:
    if not DIGEST_RE.fullmatch(value):
        raise ValueError(f"not a sha256 digest: {value!r}")
    return value


def check_rel_path(value: str) -> str:
    """Paths inside an artifact: relative, forward slashes, no '..', no ':' (FAT32/exFAT-safe)."""
    p = PurePosixPath(value)
    if (
        not value
        or p.is_absolute()
        or ".." in p.parts
        or "\\" in value
        or ":" in value
        or value.endswith("/")
    ):
        raise ValueError(f"unsafe path {value!r}")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Chunk(_Strict):
    digest: str
    size: int = Field(ge=0, le=MAX_SIZE)

    _d = field_validator("digest")(classmethod(lambda cls, v: check_digest(v)))


class FileEntry(_Strict):
    """One file of an artifact. Stored as blob `digest`, or (above the chunk size) as the
    ordered `chunks`, each its own blob; `digest`/`size` then describe the joined file."""

    path: str
    digest: str
    size: int = Field(ge=0, le=MAX_SIZE)
    mode: str | None = None
    chunks: list[Chunk] | None = None

    _d = field_validator("digest")(classmethod(lambda cls, v: check_digest(v)))
    _p = field_validator("path")(classmethod(lambda cls, v: check_rel_path(v)))

    def blobs(self) -> list[tuple[str, int]]:
        if self.chunks:
            return [(c.digest, c.size) for c in self.chunks]
        return [(self.digest, self.size)]


class Source(_Strict):
    url: str | None = None
    path: str | None = None  # a repository path, or the directory a `deb` tarball was packed from
    deb: str | None = None  # the Debian package file (of this bundle's apt repo) it was packed from
    sha256: str | None = None  # the pinned upstream checksum (hex), when there is one
    # `path` is a directory packed by the builder: a package as one zipapp, or a test chart
    packed: Literal["zipapp", "chart"] | None = None


class ImageInfo(_Strict):
    reference: str  # original reference, e.g. registry.k8s.io/pause:3.6
    manifest_digest: str
    media_type: str
    config_digest: str
    layers: list[str]
    platform: str = "linux/amd64"
    source_digest: str | None = None  # the digest pulled by (may be a multi-arch index)


class AptInfo(_Strict):
    distro: str
    codename: str
    arch: str = "amd64"
    packages: list[str] = []
    # The OpenPGP key the repository's InRelease is signed with (bundle/aptsign.py): its
    # fingerprint and the ASCII-armored public key the nodes' apt reads it with (signed-by=).
    signed_by: str | None = Field(default=None, pattern=r"^[0-9A-F]{40}$")
    keyring: str | None = None


class Artifact(_Strict):
    name: str
    kind: Kind
    version: str | None = None
    size: int = Field(ge=0, le=MAX_SIZE)
    digest: str
    test_only: bool = False
    files: list[FileEntry]
    source: Source | None = None
    install_path: str | None = None
    image: ImageInfo | None = None
    apt: AptInfo | None = None
    images: list[str] | None = None  # helm-chart: image references the chart's values pull
    role: Role | None = None  # file: "controller-runtime" = the Python install-toolkit.sh unpacks
    # file, test_only: the Kubernetes release a kubeadm/kubelet/kubectl is bundled for when its own
    # `version` differs (the lab's Debian kubectl client, v1.20, for a 1.23 cluster)
    kubernetes: str | None = None

    _d = field_validator("digest")(classmethod(lambda cls, v: check_digest(v)))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.fullmatch(v):
            raise ValueError(f"artifact name {v!r} must match {_NAME_RE.pattern}")
        return v

    @field_validator("kubernetes")
    @classmethod
    def _kubernetes(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not info.data.get("test_only"):
            raise ValueError("kubernetes (a tool bundled for another release than its own) is test_only")
        return v

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.name}"


class OciIndexRef(_Strict):
    digest: str
    size: int = Field(ge=0, le=MAX_SIZE)


class RootFile(_Strict):
    """A plain file at the bundle's root, not a blob: install-toolkit.sh (the only one)."""

    path: Literal["install-toolkit.sh"] = INSTALL_SCRIPT
    digest: str
    size: int = Field(ge=0, le=MAX_SIZE)

    _d = field_validator("digest")(classmethod(lambda cls, v: check_digest(v)))


class Manifest(_Strict):
    schema_: Literal["appliance-bundle"] = Field(SCHEMA, alias="schema")
    schema_version: Literal[1] = SCHEMA_VERSION
    profile: str
    created: str
    tool_version: str
    chunk_size: int = Field(gt=0, le=FAT32_MAX)
    oci_index: OciIndexRef | None = None
    install_script: RootFile | None = None  # absent when the bundle carries no toolkit wheel
    artifacts: list[Artifact]

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def to_json(self) -> bytes:
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        return (json.dumps(data, indent=1, sort_keys=False) + "\n").encode()

    def blob_owners(self) -> dict[str, tuple[int, list[str]]]:
        """hex digest -> (size, labels of the artifacts using it)."""
        owners: dict[str, tuple[int, list[str]]] = {}
        for a in self.artifacts:
            for f in a.files:
                for d, size in f.blobs():
                    entry = owners.setdefault(hex_of(d), (size, []))
                    if a.label not in entry[1]:
                        entry[1].append(a.label)
        return owners


def tree_digest(files: list[FileEntry]) -> str:
    """Digest of a multi-file artifact: sha256 over sorted 'path NUL digest LF' lines."""
    lines = "".join(f"{f.path}\0{f.digest}\n" for f in sorted(files, key=lambda f: f.path))
    return sha256_digest(lines.encode())


def field_path(loc: tuple[int | str, ...] | list[int | str], sep: str = ".") -> str:
    """A pydantic error's location as `artifacts.3.name: `, for a message of one line: a key read
    from the file is shown escaped when it holds anything but printable characters (a newline
    would start a line of its own, a forged `error:`); nothing for the document itself."""
    parts = [str(x) if str(x).isprintable() else repr(x) for x in loc]
    return f"{sep.join(parts)}: " if parts else ""


def parse_manifest(raw: bytes, where: str = MANIFEST) -> Manifest:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:  # the int digit limit's advice is for developers
        raise BundleError(f"{where} is not valid JSON: {str(exc).split(';')[0]}") from None
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise BundleError(f"{where} is not valid JSON: nested too deep") from None
    if not isinstance(data, dict):
        raise BundleError(f"{where} is not a JSON object")
    if data.get("schema") != SCHEMA or data.get("schema_version") != SCHEMA_VERSION:
        raise BundleError(
            f"{where}: unsupported schema {data.get('schema')!r} v{data.get('schema_version')!r}",
            hint=f"this toolkit reads {SCHEMA} v{SCHEMA_VERSION}",
        )
    try:
        m = Manifest.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise BundleError(f"{where}: {field_path(e['loc'])}{e['msg']}") from None
    seen: set[str] = set()
    for a in m.artifacts:
        if a.label in seen:
            raise BundleError(f"{where}: duplicate artifact {a.label}")
        seen.add(a.label)
    return m


# manifest.json, manifest.sig, index.json and oci-layout are read whole; a real one is kilobytes
METADATA_LIMIT = 64 * 1024**2


def read_metadata(path: Path, limit: int = METADATA_LIMIT) -> bytes:
    """A metadata file of the stick, read whole: OSError unless it is a regular file (a symlink
    to one is followed) of at most `limit` bytes (fsutil.read_regular)."""
    return read_regular(path, limit)


def load_manifest(root: Path) -> tuple[Manifest, bytes]:
    path = root / MANIFEST
    try:
        raw = read_metadata(path)
    except FileNotFoundError:
        raise BundleError(
            f"{path}: no manifest.json — not a bundle", hint="build one with `appliance bundle build`"
        ) from None
    except OSError as exc:
        raise BundleError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_manifest(raw, str(path)), raw


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """fsutil.atomic_write (readers see the old or the new file, never half); OSError as BundleError."""
    try:
        replace_file(path, data, mode)
    except OSError as exc:
        raise_os_error(exc, path)


def write_if_changed(path: Path, data: bytes, mode: int = 0o644) -> bool:
    """fsutil.write_if_changed (a rebuild or re-sign that changes nothing touches nothing: a stick
    verified meanwhile never shows a temporary file at its root); OSError as BundleError."""
    try:
        return replace_if_changed(path, data, mode)
    except OSError as exc:
        raise_os_error(exc, path)
        raise  # not reached: raise_os_error always raises


def raise_os_error(exc: OSError, path: Path) -> None:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        raise BundleError(
            f"no space left on device while writing {path}",
            hint="free space and re-run: finished blobs are kept, half-written ones are removed",
        ) from None
    raise BundleError(f"cannot write {path}: {exc.strerror or exc}") from None
