"""The install gate (core/bundlegate.py) on real signed bundles: which key is trusted, when an
unsigned bundle is refused or only warned about, --no-verify-bundle, and the manifest digest it
hands to the master (whose copy step refuses any other manifest)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from appliance_cli.bundle import keygen, sign_bundle
from appliance_cli.bundle.verify import KEY_ENV
from appliance_cli.core import bundlegate
from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.errors import BundleError
from tests._support.bundles import build, make_profile

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str, Path]:
    """(bundle, trusted public key, its key id, another key's public half)."""
    tmp = tmp_path_factory.mktemp("gate")
    root = build(tmp, make_profile(tmp)).path
    _, pub, kid = keygen(tmp / "site-key")
    sign_bundle(root, tmp / "site-key.key")
    _, other, _ = keygen(tmp / "other-key")
    return root, pub, kid, other


def _site(tmp: Path, **bundle: object) -> SiteConfig:
    text = (
        (REPO / "inventories" / "example" / "appliance.yml")
        .read_text()
        .replace("stack: runai", "stack: open")
    )
    (tmp / "appliance.yml").write_text(text)
    cfg = load_site(tmp)
    return cfg.model_copy(update={"bundle": cfg.bundle.model_copy(update=bundle)})


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)


def test_verified_bundle_hands_the_manifest_digest_to_the_master(signed, tmp_path: Path) -> None:
    root, pub, kid, _ = signed
    gate = bundlegate.check(_site(tmp_path), bundle=str(root), key=str(pub))
    want = hashlib.sha256((root / "manifest.json").read_bytes()).hexdigest()
    assert gate.extravars == {"appliance_bundle_manifest_sha256": want}
    assert f"signed by {kid}" in gate.summary and gate.warning is None


def test_no_key_while_a_signature_is_required_refuses(signed, tmp_path: Path) -> None:
    root, *_ = signed
    with pytest.raises(BundleError, match="no trusted public key") as ei:
        bundlegate.check(_site(tmp_path, public_key=None), bundle=str(root))
    assert ei.value.exit_code == 4 and KEY_ENV in (ei.value.hint or "")


def test_a_key_that_did_not_sign_the_bundle_refuses(signed, tmp_path: Path) -> None:
    root, _, kid, other = signed
    with pytest.raises(BundleError, match=r"wrong key: manifest.sig was made by key sha256:\w{12}…") as ei:
        bundlegate.check(_site(tmp_path), bundle=str(root), key=str(other))
    assert ei.value.exit_code == 4 and kid[:19] in ei.value.message
    # the bundle is not damaged: the hint says the key is wrong instead of "rebuild or re-copy"
    assert "did not sign this bundle" in (ei.value.hint or "") and "re-copy" not in (ei.value.hint or "")


def test_unsigned_bundle_refused_when_a_signature_is_required(signed, tmp_path: Path) -> None:
    root, pub, *_ = signed
    unsigned = tmp_path / "unsigned"
    shutil.copytree(root, unsigned)
    (unsigned / "manifest.sig").unlink()
    with pytest.raises(BundleError, match=r"manifest\.sig missing: the bundle is unsigned") as ei:
        bundlegate.check(_site(tmp_path), bundle=str(unsigned), key=str(pub))
    assert ei.value.exit_code == 4


def test_unsigned_bundle_only_warned_about_when_no_signature_is_required(signed, tmp_path: Path) -> None:
    root, *_ = signed
    unsigned = tmp_path / "unsigned"
    shutil.copytree(root, unsigned)
    (unsigned / "manifest.sig").unlink()
    gate = bundlegate.check(_site(tmp_path, require_signature=False, public_key=None), bundle=str(unsigned))
    assert "signature NOT checked" in gate.summary
    assert gate.warning and "signature was not checked" in gate.warning
    assert set(gate.extravars) == {"appliance_bundle_manifest_sha256"}


def test_no_verify_bundle_skips_loudly_and_hands_no_digest(tmp_path: Path) -> None:
    gate = bundlegate.check(_site(tmp_path), bundle=str(tmp_path / "nowhere"), skip=True)
    assert gate.extravars == {} and "NOT verified" in gate.summary
    assert gate.warning and "--no-verify-bundle" in gate.warning


def test_missing_bundle_is_named(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"no bundle at .*nowhere \(manifest.json missing\)"):
        bundlegate.check(_site(tmp_path), bundle=str(tmp_path / "nowhere"))


def test_key_precedence_flag_then_environment_then_site(
    signed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, pub, _, other = signed
    cfg = _site(tmp_path, public_key=str(other))
    assert bundlegate.trusted_key(cfg, None) == other
    monkeypatch.setenv(KEY_ENV, str(pub))
    assert bundlegate.trusted_key(cfg, None) == pub
    assert bundlegate.trusted_key(cfg, str(other)) == other


def _manifest_with_kubernetes(root: Path, version: str) -> None:
    """The bundle's manifest given kubeadm/kubelet/kubectl of `version` (the gate reads only the
    manifest for this rule; the signature is not checked here)."""
    import json

    m = json.loads((root / "manifest.json").read_text())
    m["artifacts"] += [
        {"kind": "file", "name": t, "version": f"{version}-standin", "install_path": f"/usr/local/bin/{t}"}
        for t in ("kubeadm", "kubelet", "kubectl")
    ]
    (root / "manifest.json").write_text(json.dumps(m))


def test_a_bundle_of_another_kubernetes_version_is_refused_unless_it_is_an_upgrades(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "manifest.json").write_text('{"artifacts": []}')
    cfg = _site(tmp_path)  # kubernetes.version v1.23.17
    bundlegate.kubernetes_binaries(cfg, root)  # no Kubernetes binaries at all: not judged
    _manifest_with_kubernetes(root, "v1.23.16")
    with pytest.raises(BundleError, match=r"carries Kubernetes v1\.23\.16, the site runs v1\.23\.17") as e:
        bundlegate.kubernetes_binaries(cfg, root)
    assert "appliance upgrade plan|apply --bundle" in (e.value.hint or "")
    root2 = tmp_path / "bundle2"
    root2.mkdir()
    (root2 / "manifest.json").write_text('{"artifacts": []}')
    _manifest_with_kubernetes(root2, "v1.23.17")
    bundlegate.kubernetes_binaries(cfg, root2)
