"""Manifest schema, chunking, dedup and the OCI layout over the same blobs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

from appliance_cli.bundle import inspect_bundle, load_manifest, verify_bundle
from appliance_cli.bundle.model import Manifest, parse_manifest
from appliance_cli.bundle.store import BlobStore
from appliance_cli.content import content_root
from appliance_cli.errors import BundleError
from tests._support.bundles import build, make_profile

SCHEMA_FILE = content_root() / "bundles" / "manifest.schema.json"


def test_manifest_roundtrip_and_layout(tmp_path: Path) -> None:
    res = build(tmp_path, make_profile(tmp_path))
    root = res.path
    m, raw = load_manifest(root)
    assert m.schema_version == 1 and m.profile == "unit"
    data = json.loads(raw)
    assert data["schema"] == "appliance-bundle"
    kinds = sorted(a.kind for a in m.artifacts)
    assert kinds == ["file", "file", "oci-image", "oci-image"]
    for a in m.artifacts:
        assert a.test_only and a.files and a.size > 0 and a.digest.startswith("sha256:")
        for f in a.files:
            assert (root / "blobs/sha256" / f.digest[7:]).is_file()
    # FAT32-safe names: no ':' anywhere, no symlinks
    for p in root.rglob("*"):
        assert ":" not in p.name and not p.is_symlink()
    assert sorted(p.name for p in root.iterdir()) == ["blobs", "index.json", "manifest.json", "oci-layout"]


def test_manifest_matches_json_schema(tmp_path: Path) -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    # the committed schema is the model's schema (regenerate with the command in bundles/README.md)
    assert schema == Manifest.model_json_schema(by_alias=True)
    res = build(tmp_path, make_profile(tmp_path))
    jsonschema.validate(json.loads((res.path / "manifest.json").read_bytes()), schema)


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda d: d.update(schema_version=2), "unsupported schema"),
        (lambda d: d["artifacts"][0].update(kind="tarball"), "artifacts.0.kind"),
        (lambda d: d["artifacts"][0]["files"][0].update(path="../etc/passwd"), "unsafe path"),
        (lambda d: d["artifacts"][0]["files"][0].update(path="a:b"), "unsafe path"),
        (lambda d: d["artifacts"][0].update(digest="md5:abc"), "not a sha256 digest"),
        (lambda d: d["artifacts"][0].update(name="bad/name"), "artifact name"),
        (lambda d: d["artifacts"].append(dict(d["artifacts"][0])), "duplicate artifact"),
        (
            lambda d: d["artifacts"][0].update(kubernetes="v1.23.17", test_only=False),
            "bundled for another release",
        ),
    ],
)
def test_manifest_rejects_bad_fields(tmp_path: Path, mutate, needle: str) -> None:
    res = build(tmp_path, make_profile(tmp_path))
    data = json.loads((res.path / "manifest.json").read_bytes())
    mutate(data)
    with pytest.raises(BundleError, match=needle):
        parse_manifest(json.dumps(data).encode())


def test_chunking_splits_and_verifies(tmp_path: Path) -> None:
    big = bytes(range(256)) * 40  # 10240 bytes
    res = build(tmp_path, make_profile(tmp_path, files={"big": big}, images=[]), chunk_size=4096)
    m, _ = load_manifest(res.path)
    (f,) = m.artifacts[0].files
    assert f.size == len(big) and f.chunks and [c.size for c in f.chunks] == [4096, 4096, 2048]
    joined = b"".join((res.path / "blobs/sha256" / c.digest[7:]).read_bytes() for c in f.chunks)
    assert joined == big
    assert not (res.path / "blobs/sha256" / f.digest[7:]).exists()  # the whole file is not stored twice
    verify_bundle(res.path)


def test_chunk_boundary_exact_multiple(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "b", chunk_size=1000, fsync=False)
    import io

    e = store.add_stream("x", io.BytesIO(b"z" * 2000))
    assert [c.size for c in e.chunks or []] == [1000, 1000]
    e = store.add_stream("y", io.BytesIO(b""))
    assert e.size == 0 and e.chunks is None


def test_dedup_shared_layer_stored_once(tmp_path: Path) -> None:
    refs = [f"registry.k8s.io/img{i}:v1" for i in range(5)]
    res = build(tmp_path, make_profile(tmp_path, files={}, images=refs))
    m, _ = load_manifest(res.path)
    layer0 = {a.image.layers[0] for a in m.artifacts}
    assert len(layer0) == 1  # every image shares the busybox base layer
    ins = inspect_bundle(res.path)
    assert ins.dedup_ratio > 3.0
    n_blobs = len(list((res.path / "blobs/sha256").iterdir()))
    assert n_blobs == 1 + 5 * 3  # base + (manifest, config, identity layer) per image


def test_root_oci_layout_readable_by_skopeo(tmp_path: Path) -> None:
    res = build(tmp_path, make_profile(tmp_path, files={}))
    r = subprocess.run(
        ["skopeo", "inspect", "--raw", f"oci:{res.path}:registry.k8s.io/etcd:3.5.6-0"],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0 and "not found" in r.stderr.lower() and "skopeo" in r.stderr.lower():
        pytest.skip("skopeo missing")
    assert r.returncode == 0, r.stderr
    m, _ = load_manifest(res.path)
    etcd = next(a for a in m.artifacts if a.name == "etcd")
    assert json.loads(r.stdout)["config"]["digest"] == etcd.image.config_digest
