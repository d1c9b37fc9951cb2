"""The stick is read once: the install gate checks signature, manifest and blob sizes, and the
master's copy (bundle_sync) hashes each blob while copying it, refusing one that differs from
the signed manifest. Bytes read are counted by the kernel (/proc/self/io rchar), so a second
pass over the stick, reintroduced anywhere in the gate or the copy, fails these tests."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from appliance_cli.bundle import keygen, sign_bundle
from appliance_cli.bundle.verify import KEY_ENV
from appliance_cli.core import bundlegate
from appliance_cli.core.siteconfig import load_site
from tests._support.bundles import build, make_profile
from tests._support.modules import load_role_module
from tests._support.paths import EXAMPLE

syncmod = load_role_module("bundle_repo", "bundle_sync")
MiB = 1024 * 1024


def rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.fixture
def stick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A signed bundle of about 24 MiB (three files of random bytes) and a site trusting its key."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    files = {f"tool-{i}": os.urandom(8 * MiB) for i in range(3)}
    root = build(tmp_path, make_profile(tmp_path, files=files, images=[])).path
    _, pub, _ = keygen(tmp_path / "key")
    sign_bundle(root, tmp_path / "key.key")
    (tmp_path / "site").mkdir()
    # the open stack: Run:ai's vendor tar is not in this bundle (the gate would refuse it)
    (tmp_path / "site/appliance.yml").write_text(EXAMPLE.read_text().replace("stack: runai", "stack: open"))
    cfg = load_site(tmp_path / "site")
    cfg = cfg.model_copy(
        update={"bundle": cfg.bundle.model_copy(update={"source": str(root), "public_key": str(pub)})}
    )
    blobs = sum(p.stat().st_size for p in (root / "blobs/sha256").iterdir())
    return cfg, root, blobs


def _install_reads(cfg, root: Path, dest: Path) -> tuple[int, dict]:
    """What `appliance install` does with the stick: the gate, then the master's copy step."""
    before = rchar()
    gate = bundlegate.check(cfg)
    res = syncmod.sync(str(root), str(dest), fsync=False,
                       expect_manifest_sha256=gate.extravars["appliance_bundle_manifest_sha256"])  # fmt: skip
    return rchar() - before, res


def test_a_fresh_master_reads_each_byte_of_the_stick_once(stick, tmp_path: Path) -> None:
    cfg, root, blobs = stick
    read, res = _install_reads(cfg, root, tmp_path / "master")
    assert res["copied"] == 3 and res["bytes_copied"] == blobs
    assert blobs <= read <= blobs * 1.05 + MiB, f"{read} bytes read for {blobs} bytes of blobs"
    for p in (root / "blobs/sha256").iterdir():  # the copy is verified and complete
        assert hashlib.sha256((tmp_path / "master/blobs/sha256" / p.name).read_bytes()).hexdigest() == p.name


def test_a_second_install_from_the_same_stick_reads_only_what_is_missing(stick, tmp_path: Path) -> None:
    cfg, root, _ = stick
    _install_reads(cfg, root, tmp_path / "master")
    victim = next((tmp_path / "master/blobs/sha256").iterdir())
    victim.unlink()  # one blob lost on the master
    read, res = _install_reads(cfg, root, tmp_path / "master")
    assert (res["copied"], res["skipped"]) == (1, 2)
    assert 8 * MiB <= read <= 8 * MiB * 1.05 + MiB, read


def test_a_corrupt_blob_is_refused_while_copying_naming_the_artifact(stick, tmp_path: Path) -> None:
    """Same size, one bit flipped: the gate's size check passes it; the copy hashes it, names the
    artifact, reports a bundle failure and leaves nothing under the blob's name nor a manifest."""
    cfg, root, _ = stick
    victim = max((root / "blobs/sha256").iterdir(), key=lambda p: p.name)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 1
    victim.write_bytes(bytes(data))
    dest = tmp_path / "master"
    with pytest.raises(
        syncmod.BadBundle,
        match=rf"sha256:{victim.name} \(file/tool-\d\): content does not match its digest \(corrupt\)",
    ):
        _install_reads(cfg, root, dest)
    assert not (dest / "blobs/sha256" / victim.name).exists()
    assert not (dest / "manifest.json").exists() and not list((dest / ".staging").iterdir())


def test_the_copy_checks_the_oci_index_against_the_manifest(tmp_path: Path) -> None:
    """The master may read another copy than the gate did (bundle.master_source): its copy step
    checks index.json against the signed manifest too, and writes no manifest."""
    root = build(tmp_path, make_profile(tmp_path)).path  # with images: an OCI index at the root
    index = root / "index.json"
    index.write_text(index.read_text().replace("{", "{ ", 1))
    dest = tmp_path / "master"
    with pytest.raises(
        syncmod.BadBundle, match=r"index\.json does not match the digest the manifest records"
    ):
        syncmod.sync(str(root), str(dest), fsync=False)
    assert not (dest / "index.json").exists() and not (dest / "manifest.json").exists()


def test_a_copied_blob_changed_on_the_master_is_caught_by_the_next_sync(stick, tmp_path: Path) -> None:
    """One byte of a blob already on the master changed (same size): its stamp (size, mtime,
    inode) no longer matches the one recorded when it was hashed, so the next sync hashes it and
    fails on one line naming the blob, its artifact and the file; the good blobs are not re-read."""
    cfg, root, _ = stick
    dest = tmp_path / "master"
    _install_reads(cfg, root, dest)
    victim = max((dest / "blobs/sha256").iterdir(), key=lambda p: p.name)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 1
    victim.write_bytes(bytes(data))
    got = hashlib.sha256(bytes(data)).hexdigest()
    before = rchar()
    with pytest.raises(syncmod.BadCopy) as e:  # appliance_failure: bundle-copy (exit 4)
        syncmod.sync(str(root), str(dest), fsync=False)
    read = rchar() - before
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{victim}: blob sha256:{victim.name} (file/tool-")
    assert f"has the manifest's size but other bytes (it hashes to sha256:{got})" in msg
    assert 8 * MiB <= read <= 8 * MiB * 1.05 + MiB, read  # the changed blob, not the other two


def test_blobs_no_record_vouches_for_are_hashed_once_then_trusted(stick, tmp_path: Path) -> None:
    """A copy made before the record existed (or with it lost): every present blob is hashed once,
    the record written; the run after reads nothing of the blobs."""
    cfg, root, blobs = stick
    dest = tmp_path / "master"
    _install_reads(cfg, root, dest)
    (dest / ".verified").unlink()
    before = rchar()
    res = syncmod.sync(str(root), str(dest), fsync=False)
    assert res["copied"] == 0 and blobs <= rchar() - before <= blobs * 1.05 + MiB
    assert (dest / ".verified").is_file()
    before = rchar()
    assert syncmod.sync(str(root), str(dest), fsync=False)["changed"] is False
    assert rchar() - before < MiB
