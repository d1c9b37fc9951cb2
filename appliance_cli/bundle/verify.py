"""`bundle verify`: signature, completeness and a parallel re-hash of every blob.

hashlib releases the GIL while hashing buffers over 2 KiB, and readinto() releases it during I/O,
so a plain thread pool with large reads scales across cores without processes."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from appliance_cli.bundle.model import (
    BLOB_DIR,
    MANIFEST,
    OCI_INDEX,
    OCI_LAYOUT,
    OCI_LAYOUT_BYTES,
    SIGNATURE,
    Manifest,
    RootFile,
    load_manifest,
    read_metadata,
    sha256_digest,
)
from appliance_cli.bundle.progress import ProgressEvent, ProgressFn, no_progress
from appliance_cli.bundle.signing import WRONG_KEY, check_signature, load_public_key
from appliance_cli.digest import sha256_file
from appliance_cli.errors import BundleError

READ_SIZE = 4 * 1024 * 1024
KEY_ENV = "APPLIANCE_BUNDLE_PUBKEY"  # the installer's trusted key, when --key is not given


@dataclass
class VerifyReport:
    path: Path
    profile: str
    manifest_digest: str
    artifacts: int
    blobs: int
    bytes: int
    seconds: float
    jobs: int
    signed: bool  # a manifest.sig is present
    signature_checked: bool  # it was checked against a trusted public key
    signature_valid: bool
    key_id: str | None
    problems: list[str] = field(default_factory=list)
    blobs_hashed: bool = True  # False: presence and sizes only (the copy to the master hashes)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def trusted(self) -> bool:
        """What `appliance install` needs: intact and signed by the key it trusts."""
        return self.ok and self.signature_checked and self.signature_valid

    @property
    def throughput(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


class BundleVerifyError(BundleError):
    """Verification failed; `problems` names every bad artifact/blob, one line each."""

    def __init__(self, report: VerifyReport):
        n = len(report.problems)
        more = f" (+{n - 1} more)" if n > 1 else ""
        super().__init__(
            f"bundle {report.path} failed verification: {report.problems[0]}{more}",
            hint=_hint(report.problems),
        )
        self.report = report
        self.problems = report.problems


def _hint(problems: list[str]) -> str:
    if problems[0].startswith(WRONG_KEY):
        return (
            "the trusted public key (--key, $APPLIANCE_BUNDLE_PUBKEY or bundle.public_key) did not sign this "
            "bundle: give the signer's key (key ids above), or re-sign the bundle with yours"
        )
    return "rebuild or re-copy the bundle; do not install from it"


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 16))


def hash_file(path: Path, buf_size: int = READ_SIZE, progress: ProgressFn = no_progress) -> tuple[str, int]:
    return sha256_file(path, buf_size, lambda n: progress(ProgressEvent("advance", "verify", nbytes=n)))


def verify_bundle(
    path: Path | str,
    key: Path | str | None = None,
    jobs: int | None = None,
    progress: ProgressFn = no_progress,
    require_signature: bool = False,
    hash_blobs: bool = True,
) -> VerifyReport:
    """Check a bundle; return the report or raise BundleVerifyError naming every problem.
    With `require_signature`, a bundle not signed by `key` (or $APPLIANCE_BUNDLE_PUBKEY) fails.
    Without `hash_blobs`, blobs are checked for presence and size only: the install gate leaves
    their hashing to the copy onto the master, which hashes every byte as it reads it (one pass
    over the stick instead of two)."""
    root = Path(path)
    if not root.is_dir():
        raise BundleError(f"{root}: not a directory")
    started = time.perf_counter()
    manifest, raw = load_manifest(root)
    key = key or os.environ.get(KEY_ENV) or None
    pub = load_public_key(Path(key)) if key else None
    sig = check_signature(root, raw, pub)
    problems: list[str] = []
    if sig.problem:
        problems.append(sig.problem)
    elif require_signature and not sig.checked:
        problems.append(f"no trusted public key given (--key or ${KEY_ENV}): the signature was not checked")

    owners = manifest.blob_owners()
    problems += _check_layout(root, manifest, owners)
    todo = _check_sizes(root / BLOB_DIR, owners, problems)

    n_jobs = jobs or default_jobs()
    total = sum(s for _, _, s in todo)
    if not hash_blobs:
        todo = []
    progress(ProgressEvent("start", "verify", total=sum(s for _, _, s in todo)))
    todo.sort(key=lambda t: -t[2])  # biggest first keeps the pool busy to the end
    with ThreadPoolExecutor(max_workers=n_jobs) as pool:
        results = pool.map(lambda t: (t[0], _safe_hash(t[1], progress)), todo)
        for hexd, got in results:
            if got != hexd:
                who = ", ".join(owners[hexd][1])
                what = "unreadable" if got is None else "content does not match its digest (corrupt)"
                problems.append(f"{who}: blob sha256:{hexd} {what}")
    progress(ProgressEvent("end", "verify"))

    report = VerifyReport(
        path=root,
        profile=manifest.profile,
        manifest_digest=sha256_digest(raw),
        artifacts=len(manifest.artifacts),
        blobs=len(owners),
        bytes=total,
        seconds=time.perf_counter() - started,
        jobs=n_jobs,
        signed=sig.present,
        signature_checked=sig.checked,
        signature_valid=sig.valid,
        key_id=sig.key_id,
        problems=problems,
        blobs_hashed=hash_blobs,
    )
    if problems:
        raise BundleVerifyError(report)
    return report


def _check_sizes(blob_dir: Path, owners: dict, problems: list[str]) -> list[tuple[str, Path, int]]:
    """Every blob present, a regular file, of its size: (hex, path, size) of those that are."""
    todo = []
    for hexd, (size, labels) in owners.items():
        p = blob_dir / hexd
        who = ", ".join(labels)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            problems.append(f"{who}: blob sha256:{hexd} is missing")
            continue
        if not _is_regular(st):
            problems.append(f"{who}: blob sha256:{hexd} is not a regular file")
        elif st.st_size != size:
            problems.append(
                f"{who}: blob sha256:{hexd} is truncated or padded ({st.st_size} bytes, expected {size})"
            )
        else:
            todo.append((hexd, p, size))
    return todo


def require_trusted(path: Path | str, key: Path | str | None = None, jobs: int | None = None) -> VerifyReport:
    """For `appliance install`: verified *and* signed by the trusted key, or BundleError."""
    return verify_bundle(path, key=key, jobs=jobs, require_signature=True)


def _safe_hash(p: Path, progress: ProgressFn) -> str | None:
    try:
        return hash_file(p, progress=progress)[0]
    except OSError:
        return None


def _is_regular(st: os.stat_result) -> bool:
    import stat

    return stat.S_ISREG(st.st_mode)


def _check_layout(root: Path, manifest: Manifest, owners: dict) -> list[str]:
    """Everything on the stick must be accounted for: no extra files, no symlinks, OCI files intact."""
    problems: list[str] = []
    allowed_top = {MANIFEST, SIGNATURE, OCI_LAYOUT, OCI_INDEX, "blobs"}
    script = manifest.install_script
    if script:
        problems += _check_root_file(root, script)
    for p in sorted(root.iterdir()):
        if script and p.name == script.path:
            continue  # checked above
        if p.is_symlink():
            problems.append(f"unexpected symlink {p.name}")
        elif p.name not in allowed_top:
            problems.append(f"unexpected {'directory' if p.is_dir() else 'file'} {p.name}")
    blobs = root / "blobs"
    if blobs.is_dir():
        for p in sorted(blobs.iterdir()):
            if p.name != "sha256" or not p.is_dir() or p.is_symlink():
                problems.append(f"unexpected entry blobs/{p.name}")
    blob_dir = root / BLOB_DIR
    if blob_dir.is_dir():
        for p in sorted(blob_dir.iterdir()):
            if p.name not in owners:
                problems.append(f"unexpected extra file {BLOB_DIR}/{p.name} (not in the manifest)")
            elif p.is_symlink():
                problems.append(f"unexpected symlink {BLOB_DIR}/{p.name}")
    images = [a for a in manifest.artifacts if a.kind == "oci-image"]
    if manifest.oci_index:
        try:
            if read_metadata(root / OCI_LAYOUT).strip() != OCI_LAYOUT_BYTES:
                problems.append(f"{OCI_LAYOUT} has unexpected content")
        except FileNotFoundError:
            problems.append(f"{OCI_LAYOUT} is missing")
        except OSError as exc:
            problems.append(f"{OCI_LAYOUT} is unreadable: {exc.strerror or exc}")
        try:
            idx = read_metadata(root / OCI_INDEX)
            if sha256_digest(idx) != manifest.oci_index.digest:
                problems.append(f"{OCI_INDEX} does not match the digest recorded in the manifest (tampered)")
        except FileNotFoundError:
            problems.append(f"{OCI_INDEX} is missing")
        except OSError as exc:
            problems.append(f"{OCI_INDEX} is unreadable: {exc.strerror or exc}")
    elif images:
        problems.append(f"manifest lists {len(images)} images but no oci_index")
    return problems


def _check_root_file(root: Path, entry: RootFile) -> list[str]:
    """A file at the root the manifest records (install-toolkit.sh): present, plain, unchanged."""
    p = root / entry.path
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return [f"{entry.path} is missing (the manifest records it)"]
    if not _is_regular(st):
        return [f"{entry.path} is not a regular file"]
    try:
        data = p.read_bytes()
    except OSError as exc:
        return [f"{entry.path} is unreadable: {exc.strerror}"]
    if len(data) != entry.size or sha256_digest(data) != entry.digest:
        return [f"{entry.path} does not match the digest recorded in the manifest (tampered)"]
    return []
