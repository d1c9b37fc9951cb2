#!/usr/bin/env python3
"""Bundle size vs its unique blobs (goal <= 1.02x) and vs one tarball per image (the way
kubespray/RKE2 carry images). Uses the lab profile's images, built locally. Prints ratios; not a test.

usage: bench_bundle_size.py [--bundle DIR]   (default: build the lab images into a temp bundle)"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

import yaml

from appliance_cli.bundle import BuildOptions, build_bundle, load_manifest
from appliance_cli.content import profiles_dir


def disk_usage(root: Path) -> tuple[int, int]:
    """(apparent bytes of every file, allocated bytes) under root."""
    apparent = alloc = 0
    for p in root.rglob("*"):
        if p.is_file():
            st = p.stat()
            apparent += st.st_size
            alloc += st.st_blocks * 512
    return apparent, alloc


def per_image_tarball_size(root: Path) -> int:
    """Size of an OCI-archive tarball per image, each holding all of its own blobs."""
    m, _ = load_manifest(root)
    total = 0
    for a in m.artifacts:
        if a.kind != "oci-image":
            continue
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as t:
            for f in a.files:
                t.add(root / "blobs/sha256" / f.digest[7:], arcname=f.path)
            idx = json.dumps({"schemaVersion": 2, "manifests": [{"digest": a.digest}]}).encode()
            ti = tarfile.TarInfo("index.json")
            ti.size = len(idx)
            t.addfile(ti, io.BytesIO(idx))
        total += len(raw.getvalue())
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", type=Path, help="measure an existing bundle instead")
    a = ap.parse_args()
    tmp = None
    root = a.bundle
    if root is None:
        tmp = Path(tempfile.mkdtemp(prefix="bench-size-"))
        lab = yaml.safe_load((profiles_dir() / "lab.yml").read_text())
        prof = {"name": "lab-images", "images": lab["images"]}
        (tmp / "p.yml").write_text(yaml.safe_dump(prof))
        root = tmp / "bundle"
        build_bundle(BuildOptions(profile=tmp / "p.yml", out=root, cache=tmp / "cache", fsync=False))
    try:
        m, _ = load_manifest(root)
        owners = m.blob_owners()
        unique = sum(s for s, _ in owners.values())
        apparent, alloc = disk_usage(root)
        images = [x for x in m.artifacts if x.kind == "oci-image"]
        img_blobs = {f.digest for x in images for f in x.files}
        img_unique = sum(owners[d[7:]][0] for d in img_blobs)
        tarballs = per_image_tarball_size(root)
        print(f"{root}: {len(m.artifacts)} artifacts ({len(images)} images), {len(owners)} unique blobs")
        print(f"  unique blob bytes      {unique:>14,}")
        print(f"  bundle bytes (files)   {apparent:>14,}  ratio {apparent / unique:.4f}x  (goal <= 1.02x)")
        print(f"  bundle bytes (on disk) {alloc:>14,}  ratio {alloc / unique:.4f}x  (filesystem blocks)")
        print(f"  images: unique blobs   {img_unique:>14,}")
        print(
            f"  images: one tarball each {tarballs:>12,}  = {tarballs / img_unique:.2f}x the bundle's image bytes"
        )
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
