"""Resolve one profile entry against upstream (through the mirror map) into a lock entry.

Runs on the connected build host at `bundle lock` time only; `bundle build` never calls it.
Every function returns what upstream *said* and refuses when upstream contradicts itself: a
download that differs from the published checksum or the helm index digest, an image index
without a linux/amd64 manifest."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import yaml

from appliance_cli.bundle import oci
from appliance_cli.bundle.fetch import download_to, fetch_bytes
from appliance_cli.bundle.lockfile import FileLock, ImageLock
from appliance_cli.bundle.mirrors import MirrorMap, RegistryTarget
from appliance_cli.bundle.model import sha256_digest
from appliance_cli.bundle.profile import ChartSpec, FileSpec, ImageSpec
from appliance_cli.errors import BundleError
from appliance_cli.fsutil import fsync_dir

PLATFORM = ("linux", "amd64")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def url_filename(url: str) -> str:
    return url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


# -- files and charts -----------------------------------------------------------------------------
def parse_published_checksum(text: str, filename: str) -> str | None:
    """A bare sha256 (kubernetes' .sha256), or sha256sum lines ('HEX  NAME' / 'HEX *NAME')."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 1 and _HEX64.fullmatch(parts[0].lower()):
            return parts[0].lower()
        if len(parts) >= 2 and _HEX64.fullmatch(parts[0].lower()):
            name = parts[-1].lstrip("*")
            if name == filename or name.endswith("/" + filename):
                return parts[0].lower()
    return None


def _download_hashed(url: str, mirrors: MirrorMap, cache: Path, label: str) -> tuple[str, int]:
    """Download into cache/files/<sha256> (where `bundle build` looks first); (sha256, size)."""
    files = cache / "files"
    files.mkdir(parents=True, exist_ok=True)
    tmp = files / f"lock-{url_filename(url)}"
    sha = download_to(mirrors.url(url), tmp, label)
    final = files / sha
    size = tmp.stat().st_size
    tmp.replace(final)  # download_to fsynced it: its name, once known, is all that changes
    fsync_dir(files)
    return sha, size


def resolve_file(spec: FileSpec, mirrors: MirrorMap, cache: Path, label: str) -> FileLock:
    assert spec.url
    published = None
    if spec.checksum_url:
        text = fetch_bytes(mirrors.url(spec.checksum_url), label).decode(errors="replace")
        published = parse_published_checksum(text, spec.filename or url_filename(spec.url))
        if published is None:
            raise BundleError(
                f"{label}: {spec.checksum_url} names no sha256 for {url_filename(spec.url)}",
                hint="check the entry's checksum_url",
            )
    sha, size = _download_hashed(spec.url, mirrors, cache, label)
    if published is not None and sha != published:
        (cache / "files" / sha).unlink(missing_ok=True)
        raise BundleError(
            f"{label}: the download of {spec.url} has sha256 {sha}, upstream publishes {published} "
            f"({spec.checksum_url})",
            hint="a corrupted or substituted download (or a wrong mirror): nothing was locked",
        )
    method = "published" if published else "tofu"
    return FileLock(
        url=spec.url,
        version=spec.version,
        sha256=sha,
        size=size,
        method=method,
        checksum_url=spec.checksum_url,
        resolved_at=now(),
    )


def helm_index_digest(spec: ChartSpec, mirrors: MirrorMap, label: str) -> tuple[str, str]:
    """(the digest the repository's index.yaml publishes for this chart version, index URL)."""
    assert spec.repo
    index_url = spec.repo.rstrip("/") + "/index.yaml"
    try:
        index = yaml.safe_load(fetch_bytes(mirrors.url(index_url), label))
        versions = index["entries"][spec.name]
    except (yaml.YAMLError, KeyError, TypeError):
        raise BundleError(f"{label}: {index_url} lists no chart named {spec.name}") from None
    for v in versions:
        if str(v.get("version")) == str(spec.version) and _HEX64.fullmatch(str(v.get("digest", ""))):
            return str(v["digest"]), index_url
    raise BundleError(
        f"{label}: {index_url} has no digest for {spec.name} {spec.version}",
        hint="check the chart's name, version and repo",
    )


def resolve_chart(spec: ChartSpec, mirrors: MirrorMap, cache: Path, label: str) -> FileLock:
    if not spec.repo:
        return resolve_file(spec, mirrors, cache, label)
    assert spec.url
    published, index_url = helm_index_digest(spec, mirrors, label)
    sha, size = _download_hashed(spec.url, mirrors, cache, label)
    if sha != published:
        (cache / "files" / sha).unlink(missing_ok=True)
        raise BundleError(
            f"{label}: the download of {spec.url} has sha256 {sha}, the helm repository's index "
            f"publishes {published} ({index_url})",
            hint="a corrupted or substituted chart (or a wrong mirror): nothing was locked",
        )
    return FileLock(
        url=spec.url,
        version=spec.version,
        sha256=sha,
        size=size,
        method="helm-index",
        index_url=index_url,
        resolved_at=now(),
    )


# -- images ---------------------------------------------------------------------------------------
def _skopeo_inspect(target: RegistryTarget, ref: str, label: str, *extra: str) -> bytes:
    if not shutil.which("skopeo"):
        raise BundleError(f"{label}: skopeo is needed to resolve images", hint="apt-get install skopeo")
    cmd = ["skopeo", "inspect", "--retry-times", "2", "--raw", *extra]
    if not target.tls_verify:
        cmd.append("--tls-verify=false")
    r = subprocess.run([*cmd, f"docker://{target.repo}{ref}"], capture_output=True)
    if r.returncode != 0:
        last = (r.stderr.decode(errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise BundleError(f"{label}: skopeo inspect docker://{target.repo}{ref} failed: {last}")
    return r.stdout


def platform_digest(raw: bytes, target: RegistryTarget, digest: str, label: str) -> tuple[str, str]:
    """(linux/amd64 manifest digest, media type) of the index or manifest `raw`."""
    doc = json.loads(raw)
    media = doc.get("mediaType") or (oci.MT_INDEX if "manifests" in doc else oci.MT_MANIFEST)
    if "manifests" in doc:
        found = [
            m
            for m in doc["manifests"]
            if (m.get("platform", {}).get("os"), m.get("platform", {}).get("architecture")) == PLATFORM
        ]
        if not found:
            have = sorted(
                {
                    f"{m.get('platform', {}).get('os')}/{m.get('platform', {}).get('architecture')}"
                    for m in doc["manifests"]
                }
            )
            raise BundleError(
                f"{label}: the index {digest} has no linux/amd64 image (it has {', '.join(have) or 'none'})",
                hint="the nodes are amd64: choose a tag published for linux/amd64",
            )
        return str(found[0]["digest"]), media
    config = json.loads(_skopeo_inspect(target, f"@{digest}", label, "--config"))
    if (config.get("os"), config.get("architecture")) != PLATFORM:
        raise BundleError(
            f"{label}: {digest} is a single {config.get('os')}/{config.get('architecture')} image, "
            "not linux/amd64",
            hint="the nodes are amd64: choose a tag published for linux/amd64",
        )
    return digest, media


def resolve_image(spec: ImageSpec, mirrors: MirrorMap, label: str) -> ImageLock:
    """The tag's current digest and its amd64 manifest."""
    tag = oci.tag_of(spec.reference)
    if tag is None:
        raise BundleError(f"{label}: {spec.reference} has no tag to resolve", hint="write repo:tag")
    target = mirrors.registry(oci.repository_of(spec.reference))
    raw = _skopeo_inspect(target, f":{tag}", label)
    digest = sha256_digest(raw)
    plat, media = platform_digest(raw, target, digest, label)
    return ImageLock(
        reference=spec.reference,
        digest=digest,
        platform_digest=plat,
        media_type=media,
        method="registry",
        resolved_at=now(),
    )


def complete_image(entry: ImageLock, mirrors: MirrorMap, label: str) -> ImageLock:
    """Fill the amd64 manifest digest of an entry locked by its index digest alone (reviewed
    values): reads the locked digest itself, never the tag."""
    target = mirrors.registry(oci.repository_of(entry.reference))
    raw = _skopeo_inspect(target, f"@{entry.digest}", label)
    if sha256_digest(raw) != entry.digest:
        raise BundleError(f"{label}: the registry served other bytes for {entry.digest}")
    plat, media = platform_digest(raw, target, entry.digest, label)
    return entry.model_copy(update={"platform_digest": plat, "media_type": media})
