"""Downloads into the build cache: streamed, checksum-checked, resumable through a .part file."""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from pathlib import Path

from appliance_cli.bundle.model import raise_os_error
from appliance_cli.bundle.progress import ProgressEvent, ProgressFn, no_progress
from appliance_cli.errors import BundleError
from appliance_cli.fsutil import atomic_stream, fsync_dir

READ_SIZE = 1024 * 1024
TIMEOUT_S = 60


def fetch(
    url: str,
    sha256: str,
    cache_dir: Path,
    label: str,
    progress: ProgressFn = no_progress,
    pinned_by: str = "the profile",
) -> Path:
    """Return cache_dir/<sha256>, downloading it if needed. A .part left by an interrupted run is
    resumed with a Range request; a checksum mismatch deletes it so the next run starts clean."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = cache_dir / sha256
    if final.is_file():
        return final
    part = cache_dir / f"{sha256}.part"
    have = part.stat().st_size if part.exists() else 0
    req = urllib.request.Request(url, headers={"User-Agent": "appliance-bundle/1"})
    if have:
        req.add_header("Range", f"bytes={have}-")
    try:
        resp = urllib.request.urlopen(req, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # the .part is already complete (or too long): re-check it
            resp = None
        else:
            raise BundleError(f"{label}: download of {url} failed: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BundleError(f"{label}: cannot reach {url}: {reason}", hint="re-run to resume") from None

    h = hashlib.sha256()
    if resp is not None:
        with resp:
            resumed = have and resp.status == 206
            if not resumed:
                have = 0
            total = resp.length + have if resp.length is not None else None
            progress(ProgressEvent("start", label, total=total))
            if resumed:
                _hash_existing(part, h)
                progress(ProgressEvent("advance", label, nbytes=have))
            try:
                with open(part, "ab" if resumed else "wb") as out:
                    while chunk := resp.read(READ_SIZE):
                        h.update(chunk)
                        out.write(chunk)
                        progress(ProgressEvent("advance", label, nbytes=len(chunk)))
                    out.flush()
                    os.fsync(out.fileno())
            except OSError as exc:
                raise_os_error(exc, part)  # the .part stays: a re-run resumes it
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                raise BundleError(
                    f"{label}: download of {url} interrupted: {exc}", hint="re-run to resume"
                ) from None
            progress(ProgressEvent("end", label))
    else:
        _hash_existing(part, h)
    got = h.hexdigest()
    if got != sha256:
        part.unlink(missing_ok=True)
        raise BundleError(
            f"{label}: sha256 of {url} is {got}, {pinned_by} pins {sha256}",
            hint="the download is not what was pinned: check the URL (or mirror), then the pin",
        )
    os.replace(part, final)  # fsynced above
    fsync_dir(cache_dir)
    return final


def _hash_existing(path: Path, h) -> None:
    with open(path, "rb") as f:
        while b := f.read(READ_SIZE):
            h.update(b)


def fetch_bytes(url: str, label: str, limit: int = 64 * 1024 * 1024) -> bytes:
    """A small document (a published checksum, index.yaml, Release, Packages.xz) in memory."""
    req = urllib.request.Request(url, headers={"User-Agent": "appliance-bundle/1"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            data = resp.read(limit + 1)
    except urllib.error.HTTPError as exc:
        raise BundleError(f"{label}: {url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise BundleError(f"{label}: cannot reach {url}: {getattr(exc, 'reason', exc)}") from None
    if len(data) > limit:
        raise BundleError(f"{label}: {url} is larger than {limit} bytes; not a checksum or index file")
    return data


def download_to(url: str, dest: Path, label: str, progress: ProgressFn = no_progress) -> str:
    """Download url to dest (fsutil.atomic_stream: renamed in when complete); its sha256 hex.
    The caller compares it with what it expects; nothing is trusted here."""
    h = hashlib.sha256()
    req = urllib.request.Request(url, headers={"User-Agent": "appliance-bundle/1"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp, atomic_stream(dest) as out:
            progress(ProgressEvent("start", label, total=resp.length))
            while chunk := resp.read(READ_SIZE):
                h.update(chunk)
                out.write(chunk)
                progress(ProgressEvent("advance", label, nbytes=len(chunk)))
            progress(ProgressEvent("end", label))
    except urllib.error.HTTPError as exc:
        raise BundleError(f"{label}: download of {url} failed: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None and not isinstance(exc, urllib.error.URLError):
            raise_os_error(exc, dest)
        raise BundleError(f"{label}: cannot reach {url}: {getattr(exc, 'reason', exc)}") from None
    return h.hexdigest()
