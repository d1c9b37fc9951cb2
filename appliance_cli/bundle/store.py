"""Content-addressed blob store under <bundle>/blobs/sha256/.

Every write goes to <bundle>/.staging/ first and is renamed into place only once complete and
fsynced, so an interrupted build never leaves a half-written blob under blobs/. Files above the
chunk size are split into chunk blobs (FAT32 cannot hold a file over 4 GiB)."""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from appliance_cli.bundle.model import (
    BLOB_DIR,
    DEFAULT_CHUNK_SIZE,
    FAT32_MAX,
    STAGING,
    Chunk,
    FileEntry,
    hex_of,
    raise_os_error,
)
from appliance_cli.bundle.progress import ProgressFn, no_progress
from appliance_cli.digest import sha256_file
from appliance_cli.errors import BundleError

READ_SIZE = 8 * 1024 * 1024


@dataclass
class StoreStats:
    written: int = 0  # blobs newly written
    skipped: int = 0  # blobs already present
    bytes_written: int = 0
    referenced: set[str] = field(default_factory=set)  # hex digests the current build uses


class BlobStore:
    def __init__(
        self,
        root: Path,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        fsync: bool = True,
        progress: ProgressFn = no_progress,
    ):
        if not 0 < chunk_size <= FAT32_MAX:
            raise BundleError(f"chunk size {chunk_size} must be between 1 and {FAT32_MAX} bytes")
        self.root = root
        self.chunk_size = chunk_size
        self.fsync = fsync
        self.progress = progress
        self.blob_dir = root / BLOB_DIR
        self.staging = root / STAGING
        self.stats = StoreStats()
        try:
            self.blob_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise_os_error(exc, self.blob_dir)

    # -- queries -------------------------------------------------------------------------------
    def path(self, digest: str) -> Path:
        return self.blob_dir / hex_of(digest)

    def has(self, digest: str, size: int | None = None) -> bool:
        """Present with the right size. Content is trusted here; `bundle verify` re-hashes."""
        try:
            st = self.path(digest).stat()
        except FileNotFoundError:
            return False
        return size is None or st.st_size == size

    def mark(self, entry: FileEntry) -> FileEntry:
        for d, _ in entry.blobs():
            self.stats.referenced.add(hex_of(d))
        return entry

    def try_reuse(self, path: str, digest: str, size: int, mode: str | None = None) -> FileEntry | None:
        """A file already in the bundle (same digest and size, unchunked): no copy needed."""
        if size <= self.chunk_size and self.has(digest, size):
            self.stats.skipped += 1
            return self.mark(FileEntry(path=path, digest=digest, size=size, mode=mode))
        return None

    # -- writes --------------------------------------------------------------------------------
    def add_bytes(self, path: str, data: bytes, mode: str | None = None) -> FileEntry:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        reused = self.try_reuse(path, digest, len(data), mode)
        if reused:
            return reused
        if len(data) > self.chunk_size:
            import io

            return self.add_stream(path, io.BytesIO(data), mode=mode)
        staged = self._stage_name()
        try:
            with open(staged, "wb") as f:
                f.write(data)
                self._sync(f)
        except OSError as exc:
            staged.unlink(missing_ok=True)
            raise_os_error(exc, self.path(digest))
        self._commit(staged, digest, len(data))
        return self.mark(FileEntry(path=path, digest=digest, size=len(data), mode=mode))

    def add_file(
        self, path: str, src: Path, mode: str | None = None, expect_digest: str | None = None
    ) -> FileEntry:
        size = src.stat().st_size
        if not expect_digest and size <= self.chunk_size:
            # hashed first: a file the bundle already has (a rebuild) is neither copied nor staged
            expect_digest = "sha256:" + sha256_file(src)[0]
        if expect_digest:
            reused = self.try_reuse(path, expect_digest, size, mode)
            if reused:
                return reused
        with open(src, "rb") as f:
            entry = self.add_stream(path, f, mode=mode, label=str(src))
        if expect_digest and entry.digest != expect_digest:
            raise BundleError(f"{src}: sha256 {entry.digest} does not match the expected {expect_digest}")
        return entry

    def add_stream(self, path: str, f, mode: str | None = None, label: str | None = None) -> FileEntry:
        """Copy a stream in one pass: hash the whole file and each chunk while writing."""
        whole = hashlib.sha256()
        chunks: list[Chunk] = []
        total = 0
        buf = bytearray(READ_SIZE)
        view = memoryview(buf)
        eof = False
        while not eof:
            staged = self._stage_name()
            h = hashlib.sha256()
            n_chunk = 0
            try:
                with open(staged, "wb") as out:
                    while n_chunk < self.chunk_size:
                        want = min(READ_SIZE, self.chunk_size - n_chunk)
                        n = f.readinto(view[:want])
                        if not n:
                            eof = True
                            break
                        part = view[:n]
                        h.update(part)
                        whole.update(part)
                        out.write(part)
                        n_chunk += n
                        self.progress(_adv(label or path, n))
                    self._sync(out)
            except OSError as exc:
                staged.unlink(missing_ok=True)
                raise_os_error(exc, self.blob_dir / f"<blob of {path}>")
            if n_chunk == 0 and chunks:
                staged.unlink(missing_ok=True)
                break
            digest = "sha256:" + h.hexdigest()
            self._commit(staged, digest, n_chunk)
            chunks.append(Chunk(digest=digest, size=n_chunk))
            total += n_chunk
        whole_digest = "sha256:" + whole.hexdigest()
        entry = FileEntry(
            path=path,
            digest=whole_digest,
            size=total,
            mode=mode,
            chunks=chunks if len(chunks) > 1 else None,
        )
        return self.mark(entry)

    def _stage_name(self) -> Path:
        # made on the first write only: a rebuild that writes nothing adds no entry to the bundle's
        # root, which a `bundle verify` reading it meanwhile would refuse as unexpected
        try:
            self.staging.mkdir(exist_ok=True)
        except OSError as exc:
            raise_os_error(exc, self.staging)
        return self.staging / f"{uuid.uuid4().hex}.part"

    def _sync(self, f) -> None:
        if self.fsync:
            f.flush()
            os.fsync(f.fileno())

    def _commit(self, staged: Path, digest: str, size: int) -> None:
        final = self.path(digest)
        if self.has(digest, size):
            staged.unlink(missing_ok=True)
            self.stats.skipped += 1
            return
        try:
            os.replace(staged, final)
        except OSError as exc:
            staged.unlink(missing_ok=True)
            raise_os_error(exc, final)
        self.stats.written += 1
        self.stats.bytes_written += size

    # -- housekeeping --------------------------------------------------------------------------
    def prune(self) -> list[str]:
        """Drop blobs no artifact of this build references (an older profile's leftovers)."""
        removed = []
        for p in self.blob_dir.iterdir():
            if p.name not in self.stats.referenced:
                p.unlink()
                removed.append(p.name)
        return removed

    def clean_staging(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def _adv(item: str, n: int):
    from appliance_cli.bundle.progress import ProgressEvent

    return ProgressEvent("advance", item, nbytes=n)
