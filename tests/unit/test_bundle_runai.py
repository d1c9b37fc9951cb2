"""import-runai: unsafe tars refused naming the member; images/charts/files imported."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from appliance_cli.bundle import import_runai, load_manifest, verify_bundle
from appliance_cli.bundle.oci import build_local_image
from appliance_cli.cli.main import main
from appliance_cli.errors import BundleError
from tests._support.bundles import (
    BUSYBOX,
    build,
    make_profile,
)


def _add(t: tarfile.TarFile, name: str, data: bytes = b"", **attrs) -> None:
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    for k, v in attrs.items():
        setattr(ti, k, v)
    t.addfile(ti, io.BytesIO(data) if data else None)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return build(tmp_path, make_profile(tmp_path, images=[])).path


@pytest.mark.parametrize(
    "member, attrs, reason",
    [
        ("../evil", {}, "'..' in path"),
        ("/etc/passwd", {}, "absolute path"),
        ("images/link", {"type": tarfile.SYMTYPE, "linkname": "/etc/shadow"}, "symlink"),
        ("images/hard", {"type": tarfile.LNKTYPE, "linkname": "images/readme"}, "hard link"),
        ("images/dev", {"type": tarfile.CHRTYPE}, "not a regular file"),
    ],
)
def test_unsafe_members_refused(tmp_path: Path, bundle: Path, member, attrs, reason) -> None:
    tar = tmp_path / "Run:ai-2.13.tar"
    with tarfile.open(tar, "w") as t:
        _add(t, "images/readme", b"hi")
        _add(t, member, b"x" if not attrs else b"", **attrs)
    before = (bundle / "manifest.json").read_bytes()
    with pytest.raises(BundleError) as ei:
        import_runai(tar, bundle)
    assert member in ei.value.message and reason in ei.value.message and "\n" not in ei.value.message
    assert (bundle / "manifest.json").read_bytes() == before
    assert not (tmp_path / "evil").exists()


def test_not_a_tar(tmp_path: Path, bundle: Path, capsys) -> None:
    bad = tmp_path / "runai-2.13.tar"
    bad.write_bytes(b"this is not a tar" * 100)
    assert main(["bundle", "import-runai", str(bad), "--into", str(bundle)]) == 4
    err = capsys.readouterr().err
    assert "not a readable tar archive" in err and "Traceback" not in err


def _oci_archive(refs: list[str]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        index = {"schemaVersion": 2, "manifests": []}
        for ref in refs:
            blobs = build_local_image(ref, BUSYBOX)
            mb = blobs.pop("manifest")
            import hashlib

            md = "sha256:" + hashlib.sha256(mb).hexdigest()
            blobs[md] = mb
            for d, b in blobs.items():
                if f"blobs/sha256/{d[7:]}" not in t.getnames():
                    _add(t, f"blobs/sha256/{d[7:]}", b)
            index["manifests"].append(
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": md,
                    "size": len(mb),
                    "annotations": {"io.containerd.image.name": ref},
                }
            )
        _add(t, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(t, "index.json", json.dumps(index).encode())
    return raw.getvalue()


def _docker_save() -> bytes:
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        _add(t, "hello.txt", b"hello\n")
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}}).encode()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        _add(t, "abc/layer.tar", layer.getvalue())
        _add(t, "cfg.json", config)
        _add(
            t,
            "manifest.json",
            json.dumps(
                [
                    {
                        "Config": "cfg.json",
                        "RepoTags": ["gcr.io/run-ai-prod/agent:2.13.0"],
                        "Layers": ["abc/layer.tar"],
                    }
                ]
            ).encode(),
        )
    return raw.getvalue()


def _chart() -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as t:
        _add(t, "runai-backend/Chart.yaml", b"apiVersion: v2\nname: runai-backend\nversion: 2.13.0\n")
        _add(t, "runai-backend/values.yaml", b"global: {}\n")
    return raw.getvalue()


def test_import_images_charts_files(tmp_path: Path, bundle: Path) -> None:
    tar = tmp_path / "Run:ai-2.13.0.tar"
    with tarfile.open(tar, "w") as t:
        _add(
            t,
            "deploy/images/backend.tar",
            _oci_archive(["gcr.io/run-ai-prod/backend:2.13.0", "gcr.io/run-ai-prod/frontend:2.13.0"]),
        )
        _add(t, "deploy/images/agent.tar", _docker_save())
        _add(t, "deploy/runai-backend-2.13.0.tgz", _chart())
        _add(t, "deploy/prepare_installation.sh", b"#!/bin/sh\n")
    arts = import_runai(tar, bundle)
    labels = sorted(a.label for a in arts)
    assert labels == [
        "file/runai-2.13.0",
        "helm-chart/runai-backend",
        "oci-image/gcr.io_run-ai-prod_agent_2.13.0",
        "oci-image/gcr.io_run-ai-prod_backend_2.13.0",
        "oci-image/gcr.io_run-ai-prod_frontend_2.13.0",
    ]
    m, _ = load_manifest(bundle)
    assert len(m.artifacts) == 2 + 5 and m.oci_index is not None
    refs = {a.image.reference for a in m.artifacts if a.image}
    assert "gcr.io/run-ai-prod/agent:2.13.0" in refs
    assert not (bundle / ".staging").exists()
    verify_bundle(bundle)
    # idempotent: a second import replaces, it does not duplicate
    import_runai(tar, bundle)
    assert len(load_manifest(bundle)[0].artifacts) == 7
