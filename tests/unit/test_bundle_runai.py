"""import-runai: unsafe tars refused naming the member; images/charts/files imported."""

from __future__ import annotations

import io
import json
import re
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
        ("", {}, "a file without a name"),  # would be written over the extraction directory
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
    assert not (bundle / ".staging").exists() or not any((bundle / ".staging").iterdir())


def test_a_tar_of_dot_imports(tmp_path: Path, bundle: Path) -> None:
    """`tar -C deploy -cf runai.tar .` starts with the directory '.': that one is no file."""
    tar = tmp_path / "runai-2.13.tar"
    with tarfile.open(tar, "w") as t:
        _add(t, ".", b"", type=tarfile.DIRTYPE)
        _add(t, "./bin/runai", b"#!/bin/sh\n", mode=0o755)
        _add(t, "./README", b"hi")
    [art] = import_runai(tar, bundle)
    assert sorted(f.path for f in art.files) == ["README", "bin/runai"]


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


# --- a nested image's manifest.json names only files of that image (issue 28) -------------------

SECRET = b"build host secret\n"


def _evil_docker_save(
    config: str, layer: str = "abc/layer.tar", member: tuple[str, dict] | None = None
) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        _add(t, "abc/layer.tar", b"\0" * 1024)
        _add(t, "cfg.json", b"{}")
        if member:
            _add(t, member[0], **member[1])
        entry = {"Config": config, "RepoTags": ["evil:1"], "Layers": [layer]}
        _add(t, "manifest.json", json.dumps([entry]).encode())
    return raw.getvalue()


def _bundle_holds(bundle: Path, data: bytes) -> bool:
    return any(data in p.read_bytes() for p in bundle.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.parametrize(
    "case",
    ["config absolute", "config up to the root", "config elsewhere in the vendor tar", "layer absolute",
     "layer up to the root", "symlink member"],
)  # fmt: skip
def test_a_nested_manifest_naming_a_file_outside_the_image_is_refused(
    tmp_path: Path, bundle: Path, capsys, case: str
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    up = "../" * 40 + str(secret).lstrip("/")  # extra '..' stop at /, so this reaches the secret
    image, offending = {
        "config absolute": (_evil_docker_save(str(secret)), str(secret)),
        "config up to the root": (_evil_docker_save(up), up),
        "config elsewhere in the vendor tar": (
            _evil_docker_save("../../prepare_installation.sh"),
            "../../prepare_installation.sh",
        ),
        "layer absolute": (_evil_docker_save("cfg.json", str(secret)), str(secret)),
        "layer up to the root": (_evil_docker_save("cfg.json", up), up),
        "symlink member": (
            _evil_docker_save(
                "link.json", member=("link.json", {"type": tarfile.SYMTYPE, "linkname": str(secret)})
            ),
            "link.json",
        ),
    }[case]
    tar = tmp_path / "Run:ai-2.13.0.tar"
    with tarfile.open(tar, "w") as t:
        _add(t, "deploy/images/agent.tar", image)
        _add(t, "deploy/prepare_installation.sh", SECRET)
    before = (bundle / "manifest.json").read_bytes()
    assert main(["bundle", "import-runai", str(tar), "--into", str(bundle)]) == 4
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = " ".join(err.split())  # the one message, as rich may wrap it
    assert "Run:ai-2.13.0.tar: agent.tar: " in line and repr(offending) in line
    assert (bundle / "manifest.json").read_bytes() == before
    assert not _bundle_holds(bundle, SECRET), "a file from outside the image was copied into the bundle"


def test_an_oci_digest_that_names_a_path_is_refused(tmp_path: Path, bundle: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    bogus = "sha256:" + "../" * 40 + str(secret).lstrip("/")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        _add(t, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(t, "index.json", json.dumps({"schemaVersion": 2, "manifests": [{"digest": bogus}]}).encode())
    tar = tmp_path / "Run:ai-2.13.0.tar"
    with tarfile.open(tar, "w") as t:
        _add(t, "deploy/images/backend.tar", raw.getvalue())
    with pytest.raises(BundleError) as ei:
        import_runai(tar, bundle)
    msg = ei.value.message
    assert msg.startswith("Run:ai-2.13.0.tar: backend.tar: not a sha256 digest: ") and "\n" not in msg
    assert not _bundle_holds(bundle, SECRET)


def test_inside_refuses_a_symlink_on_the_way_out(tmp_path: Path) -> None:
    # Extraction already refuses link members; this is the check that holds if one got through.
    from appliance_cli.bundle.runai import _inside

    sub, outside = tmp_path / "img.d", tmp_path / "outside"
    sub.mkdir()
    outside.mkdir()
    (outside / "f").write_bytes(SECRET)
    (sub / "cfg.json").write_bytes(b"{}")
    (sub / "file-link").symlink_to(outside / "f")
    (sub / "dir-link").symlink_to(outside)
    (sub / "dir").mkdir()
    assert _inside(sub, "./cfg.json", "x.tar: img.tar") == sub.resolve() / "cfg.json"
    for rel, why in [("file-link", "a symlink"), ("dir-link/f", "a symlink"), ("dir", "not a regular file"),
                     ("missing", "not a regular file"), ("", "not a path"), (None, "not a path")]:  # fmt: skip
        with pytest.raises(
            BundleError, match=re.escape(f"x.tar: img.tar: manifest.json names {rel!r}: ")
        ) as ei:
            _inside(sub, rel, "x.tar: img.tar")
        assert why in ei.value.message
