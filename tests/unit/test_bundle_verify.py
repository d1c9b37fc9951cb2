"""verify names exactly the corrupted artifact/blob for each kind of damage; signatures."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from appliance_cli.bundle import (
    BundleVerifyError,
    keygen,
    load_manifest,
    require_trusted,
    sign_bundle,
    verify_bundle,
)
from appliance_cli.cli.main import main
from appliance_cli.errors import BundleError
from tests._support.bundles import build, make_profile


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return build(tmp_path, make_profile(tmp_path)).path


def _blob_of(root: Path, artifact: str) -> Path:
    m, _ = load_manifest(root)
    a = next(a for a in m.artifacts if a.name == artifact)
    return root / "blobs/sha256" / a.files[0].digest[7:]


def _problems(root: Path, **kw) -> list[str]:
    with pytest.raises(BundleVerifyError) as ei:
        verify_bundle(root, **kw)
    assert ei.value.exit_code == 4
    return ei.value.problems


def test_clean_bundle_verifies(bundle: Path) -> None:
    rep = verify_bundle(bundle, jobs=2)
    assert rep.ok and rep.artifacts == 4 and not rep.signed and not rep.trusted


def test_flipped_byte_names_the_artifact(bundle: Path) -> None:
    p = _blob_of(bundle, "tool-b")
    data = bytearray(p.read_bytes())
    data[100] ^= 0xFF
    p.write_bytes(bytes(data))
    (problem,) = _problems(bundle)
    assert "file/tool-b" in problem and "corrupt" in problem and p.name in problem


def test_truncated_blob(bundle: Path) -> None:
    p = _blob_of(bundle, "tool-a")
    p.write_bytes(p.read_bytes()[:-3])
    (problem,) = _problems(bundle)
    assert "file/tool-a" in problem and "truncated" in problem


def test_missing_blob(bundle: Path) -> None:
    m, _ = load_manifest(bundle)
    etcd = next(a for a in m.artifacts if a.name == "etcd")
    cfg = bundle / "blobs/sha256" / etcd.image.config_digest[7:]
    cfg.unlink()
    (problem,) = _problems(bundle)
    assert "oci-image/etcd" in problem and "missing" in problem and "oci-image/pause" not in problem


def test_shared_blob_names_every_owner(bundle: Path) -> None:
    m, _ = load_manifest(bundle)
    base = next(a for a in m.artifacts if a.name == "etcd").image.layers[0]
    (bundle / "blobs/sha256" / base[7:]).write_bytes(b"x")
    (problem,) = _problems(bundle)
    assert "oci-image/etcd" in problem and "oci-image/pause" in problem


def test_extra_files_are_reported(bundle: Path) -> None:
    (bundle / "blobs/sha256" / ("0" * 64)).write_bytes(b"stray")
    (bundle / "notes.txt").write_text("hi")
    probs = _problems(bundle)
    assert any("unexpected extra file blobs/sha256/000" in p for p in probs)
    assert any("unexpected file notes.txt" in p for p in probs)


def test_symlink_is_reported(bundle: Path) -> None:
    os.symlink("manifest.json", bundle / "link")
    assert any("symlink link" in p for p in _problems(bundle))


def test_tampered_index_json(bundle: Path) -> None:
    idx = bundle / "index.json"
    idx.write_text(idx.read_text().replace("pause:3.6", "pause:3.7"))
    assert any("index.json does not match" in p for p in _problems(bundle))


def test_several_problems_all_named(bundle: Path) -> None:
    _blob_of(bundle, "tool-a").unlink()
    p = _blob_of(bundle, "tool-b")
    p.write_bytes(b"C" * p.stat().st_size)
    probs = _problems(bundle)
    assert len(probs) == 2 and any("tool-a" in x for x in probs) and any("tool-b" in x for x in probs)


def test_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"no manifest\.json"):
        verify_bundle(tmp_path)
    (tmp_path / "manifest.json").write_text("{nope")
    with pytest.raises(BundleError, match="not valid JSON"):
        verify_bundle(tmp_path)


# -- signatures -------------------------------------------------------------------------------
@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    priv, pub, _ = keygen(tmp_path / "keys" / "site")
    return priv, pub


def test_keygen_private_key_is_0600(keys) -> None:
    priv, pub = keys
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in priv.read_bytes() and b"PUBLIC KEY" in pub.read_bytes()
    with pytest.raises(BundleError, match="already exists"):
        keygen(priv.with_suffix(""))


def test_signed_bundle_is_trusted(bundle: Path, keys) -> None:
    priv, pub = keys
    kid = sign_bundle(bundle, priv)
    rep = require_trusted(bundle, key=pub)
    assert rep.trusted and rep.key_id == kid


def test_unsigned_bundle_fails_with_key(bundle: Path, keys) -> None:
    assert any("unsigned" in p for p in _problems(bundle, key=keys[1]))


def test_require_signature_without_key(bundle: Path, keys, monkeypatch) -> None:
    monkeypatch.delenv("APPLIANCE_BUNDLE_PUBKEY", raising=False)
    sign_bundle(bundle, keys[0])
    assert any("not checked" in p for p in _problems(bundle, require_signature=True))
    monkeypatch.setenv("APPLIANCE_BUNDLE_PUBKEY", str(keys[1]))
    assert require_trusted(bundle).trusted


def test_wrong_key(bundle: Path, keys, tmp_path: Path) -> None:
    sign_bundle(bundle, keys[0])
    _, other_pub, _ = keygen(tmp_path / "other")
    (problem,) = _problems(bundle, key=other_pub)
    assert problem.startswith("wrong key")


def test_tampered_manifest(bundle: Path, keys) -> None:
    sign_bundle(bundle, keys[0])
    mf = bundle / "manifest.json"
    data = json.loads(mf.read_bytes())
    data["artifacts"][0]["version"] = "2-evil"  # content-neutral change: only the signature catches it
    mf.write_text(json.dumps(data, indent=1))
    (problem,) = _problems(bundle, key=keys[1])
    assert "changed after signing" in problem


def test_public_key_given_as_private(bundle: Path, keys) -> None:
    with pytest.raises(BundleError, match="not a PEM public key"):
        verify_bundle(bundle, key=keys[0])


# -- CLI: one line, exit code 4, no traceback ---------------------------------------------------
def test_cli_verify_exit_codes(bundle: Path, keys, capsys) -> None:
    priv, pub = keys
    assert main(["bundle", "sign", str(bundle), "--key", str(priv)]) == 0
    assert main(["bundle", "verify", str(bundle), "--key", str(pub), "--jobs", "2"]) == 0
    assert "signature valid" in capsys.readouterr().out
    _blob_of(bundle, "tool-b").write_bytes(b"")
    assert main(["bundle", "verify", str(bundle), "--key", str(pub)]) == 4
    err = capsys.readouterr().err
    assert "file/tool-b" in err and "Traceback" not in err
    assert main(["bundle", "inspect", str(bundle), "--all"]) == 0
    assert "dedup ratio" in capsys.readouterr().out
