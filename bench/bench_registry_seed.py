"""Seeding the registry from the bundle, side by side over the same images:

  fast path, hard links      registry_seed (link_mode=auto) into an empty storage dir
  fast path, copies          registry_seed (link_mode=copy): copy + sha256 check + fsync
  skopeo copy loop           one `skopeo copy oci:<bundle>:<ref> docker://127.0.0.1:PORT/...`
                             per image into a running docker-registry (loopback, no auth)
  raw cp -r + sync           the unique blobs only: the floor for moving the bytes

Generates N images sharing base layers (random layer data, so nothing compresses away).
Prints figures and ratios (goals: >= 8x faster than the skopeo loop; copies <= 3x raw cp;
hard links <= 1.3x raw cp); asserts nothing. Traffic goes to 127.0.0.1 only.

usage: python bench/bench_registry_seed.py [--images 20] [--base-mb 40] [--bases 3]
                                           [--unique-mb 10] [--workdir /var/tmp] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests._support
from tests._support.modules import load_role_module
from tests._support.registry_seed import BundleWriter, free_port, layer_tar

seedmod = load_role_module("registry", "registry_seed")
REGISTRY = shutil.which("docker-registry") or "/usr/bin/docker-registry"


def make_bundle(root: Path, n: int, bases: int, base_mb: float, unique_mb: float) -> BundleWriter:
    w = BundleWriter(root)
    base_layers = [layer_tar({f"base{i}.bin": os.urandom(int(base_mb * 2**20))}) for i in range(bases)]
    for i in range(n):
        own = layer_tar({f"app{i}.bin": os.urandom(int(unique_mb * 2**20))})
        small = layer_tar({"etc/image": f"image {i}\n".encode()})
        w.add_image(
            f"img{i:02d}", f"registry.example.io/bench/img{i:02d}:v{i}", [base_layers[i % bases], own, small]
        )
    w.write()
    # bundle-root OCI layout over the same blobs (what skopeo's oci: transport reads)
    manifests = [
        {
            "mediaType": a["image"]["media_type"],
            "digest": a["image"]["manifest_digest"],
            "size": next(f["size"] for f in a["files"] if f["digest"] == a["image"]["manifest_digest"]),
            "annotations": {"org.opencontainers.image.ref.name": a["image"]["reference"]},
        }
        for a in w.artifacts
    ]
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": manifests}))
    return w


def timed(fn) -> float:
    os.sync()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def start_registry(storage: Path, work: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    cfg = work / "registry.yml"
    cfg.write_text(
        "version: 0.1\nlog: {level: error}\n"
        f"storage: {{filesystem: {{rootdirectory: {storage}}}, delete: {{enabled: false}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}'}}\n"
    )
    log = open(work / "registry.log", "wb")  # noqa: SIM115 - the process owns it
    proc = subprocess.Popen([REGISTRY, "serve", str(cfg)], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
            return proc, port
        except (urllib.error.URLError, OSError):
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.terminate()
    sys.exit("docker-registry did not start: " + (work / "registry.log").read_text()[-2000:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=20)
    ap.add_argument("--bases", type=int, default=3)
    ap.add_argument("--base-mb", type=float, default=40)
    ap.add_argument("--unique-mb", type=float, default=10)
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-registry-seed-", dir=args.workdir))
    proc = None
    try:
        bundle = work / "bundle"
        t0 = time.perf_counter()
        w = make_bundle(bundle, args.images, args.bases, args.base_mb, args.unique_mb)
        blobs = list((bundle / "blobs/sha256").iterdir())
        unique = sum(p.stat().st_size for p in blobs)
        per_image = sum(a["size"] for a in w.artifacts)
        print(
            f"{args.images} images, {len(blobs)} unique blobs, {unique / 1e6:.0f} MB unique "
            f"({per_image / 1e6:.0f} MB if stored per image); generated in {time.perf_counter() - t0:.1f}s"
        )
        res: dict[str, float] = {}
        res["raw cp -r + sync"] = timed(
            lambda: subprocess.run(
                f"cp -r {bundle / 'blobs'} {work / 'cp-dest'} && sync", shell=True, check=True
            )
        )
        res["fast path, hard links"] = timed(lambda: seedmod.seed(str(bundle), str(work / "s-link"), "auto"))
        res["fast path, copies+sha256+fsync"] = timed(
            lambda: seedmod.seed(str(bundle), str(work / "s-copy"), "copy")
        )
        res["fast path, no-op re-run"] = timed(
            lambda: seedmod.seed(str(bundle), str(work / "s-link"), "auto")
        )
        if shutil.which("skopeo") and os.access(REGISTRY, os.X_OK):
            (work / "s-skopeo").mkdir()
            proc, port = start_registry(work / "s-skopeo", work)

            def skopeo_loop() -> None:
                for a in w.artifacts:
                    repo, tag = seedmod.split_reference(a["image"]["reference"])
                    subprocess.run(
                        ["skopeo", "copy", "--quiet", "--dest-tls-verify=false",
                         f"oci:{bundle}:{a['image']['reference']}", f"docker://127.0.0.1:{port}/{repo}:{tag}"],
                        check=True,
                    )  # fmt: skip

            res["skopeo copy loop"] = timed(skopeo_loop)
        else:
            print("(skopeo or docker-registry missing: skopeo loop skipped)")

        width = max(map(len, res))
        for k, v in res.items():
            print(f"  {k:<{width}}  {v:7.3f} s")
        cp, link, copy = (
            res["raw cp -r + sync"],
            res["fast path, hard links"],
            res["fast path, copies+sha256+fsync"],
        )
        if "skopeo copy loop" in res:
            print(f"  skopeo loop / hard links      {res['skopeo copy loop'] / link:6.1f}x   (goal >= 8x)")
            print(f"  skopeo loop / copies          {res['skopeo copy loop'] / copy:6.1f}x")
        print(f"  copies+checks+fsync / raw cp  {copy / cp:6.2f}x   (goal <= 3x)")
        print(f"  hard links / raw cp           {link / cp:6.2f}x   (goal <= 1.3x)")
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
