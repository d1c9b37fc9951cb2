"""Shared helpers for the bundle tests (no tests here): a tiny profile built from local files and
locally built busybox images, fast enough for unit tests (no network, no apt)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from appliance_cli.bundle import BuildOptions, build_bundle

BUSYBOX = shutil.which("busybox") or "/bin/busybox"


def make_profile(
    tmp: Path,
    files: dict[str, bytes] | None = None,
    images: list[str] | None = None,
    extra: dict | None = None,
) -> Path:
    files = {"tool-a": b"#!/bin/sh\necho a\n", "tool-b": b"B" * 5000} if files is None else files
    images = ["registry.k8s.io/pause:3.6", "registry.k8s.io/etcd:3.5.6-0"] if images is None else images
    src = tmp / "src"
    src.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (src / name).write_bytes(data)
    prof = {
        "name": "unit",
        "files": [
            {"name": n, "source": f"src/{n}", "mode": "0755", "test_only": True, "version": "1"}
            for n in files
        ],
        "images": [
            {
                "name": ref.rsplit("/", 1)[-1].split(":")[0],
                "reference": ref,
                "build": "busybox",
                "test_only": True,
            }
            for ref in images
        ],
    }
    prof.update(extra or {})
    path = tmp / "unit.yml"
    path.write_text(yaml.safe_dump(prof))
    return path


def build(tmp: Path, profile: Path, out: Path | None = None, **kw):
    out = out or tmp / "bundle"
    opts = BuildOptions(
        profile=profile, out=out, cache=tmp / "cache", repo_root=tmp, busybox=BUSYBOX, fsync=False, **kw
    )
    return build_bundle(opts)
