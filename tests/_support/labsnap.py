"""Installed-lab snapshots for the e2e suite: what decides whether one may be reused.

A lab installed with a site config is snapshotted once (appliance_cli/lab/snapshot.py) and every
later module that wants the same installed lab starts from a copy of it, instead of installing it
again; whatever that module breaks dies with its copy. A snapshot is named by a digest of
everything that determines it, so one whose inputs changed is never reused:

* the product: roles/ (not their molecule/ scenarios), playbooks/, appliance_cli/, module_utils/, templates/, bundles/,
  inventories/lab/, ansible.cfg, pyproject.toml;
* the stand-in for what cannot run here (tests/standin/), and this file;
* the bundle on master1's stick (its manifest.json and manifest.sig) and the public key;
* the lab's name and node count, the site config the install ran with, the install's arguments;
* the base image the nodes were made from (its sha256, which its build writes beside it; it is
  built before any key is made).

APPLIANCE_E2E_SNAPSHOTS=0 turns reuse off (every configuration installs afresh, and is saved).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = (
    "roles", "playbooks", "appliance_cli", "module_utils", "templates", "bundles",
    "inventories/lab", "ansible.cfg", "pyproject.toml", "tests/standin", "tests/_support/labsnap.py",
)  # fmt: skip
# roles/*/molecule: the roles' own test scenarios, which no install reads
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "molecule"}


def tree_digest(paths: tuple[str, ...] = PRODUCT, repo: Path = REPO) -> str:
    """sha256 over every file's relative path, mode and content, in a stable order."""
    h = hashlib.sha256()
    for rel in paths:
        top = repo / rel
        files = [top] if top.is_file() else sorted(_walk(top))
        for f in files:
            h.update(str(f.relative_to(repo)).encode() + b"\0")
            h.update(oct(f.stat().st_mode & 0o777).encode() + b"\0")
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _walk(top: Path):
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in filenames:
            if not name.endswith((".pyc", ".pyo")):
                yield Path(dirpath) / name


def key(*, lab: str, nodes: int, site_text: str, bundle: Path, public_key: Path, args: tuple[str, ...],
        base_image: Path, product: str | None = None) -> str:  # fmt: skip
    h = hashlib.sha256()
    parts = [
        f"lab={lab}", f"nodes={nodes}", f"args={args!r}", f"product={product or tree_digest()}",
        f"bundle={bundle_digest(bundle)}", f"key={_file_digest(public_key)}",
    ]  # fmt: skip
    parts.append(f"base={base_digest(base_image)}")
    for p in parts:
        h.update(p.encode() + b"\n")
    h.update(site_text.encode())
    return h.hexdigest()[:20]


def bundle_digest(bundle: Path) -> str:
    """A signed bundle's identity in a key: its manifest and the signature over it."""
    return f"{_file_digest(bundle / 'manifest.json')}:{_file_digest(bundle / 'manifest.sig')}"


def base_digest(base_image: Path) -> str:
    """The base image's content digest (the sidecar its build writes). It must exist when a key is
    made: a key made before the first lab of a fresh machine built it, and one made after, would
    name two snapshots of one lab (both test processes' session labs share one)."""
    from appliance_cli.debian.rootfs import digest_sidecar

    sidecar = digest_sidecar(base_image)
    if not (base_image.is_file() and sidecar.is_file()):
        raise FileNotFoundError(
            f"{base_image}: no base image (or its .sha256) yet: build it before keying a snapshot"
        )
    return sidecar.read_text().strip()


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"


def reuse_enabled() -> bool:
    return os.environ.get("APPLIANCE_E2E_SNAPSHOTS", "1") != "0"
