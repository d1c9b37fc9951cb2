"""What `appliance install` refuses on a Run:ai site before any node is touched, one line each
naming the field or the artifact, with a hint and no traceback: no site.tls; a certificate for
another name, from another CA, or with fewer than 30 days left (exit 2); a bundle without the
vendor's tar for scheduler.version (exit 4)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from appliance_cli.bundle import import_runai, keygen, load_manifest, sign_bundle
from appliance_cli.bundle.verify import KEY_ENV
from appliance_cli.cli import install_cmd
from appliance_cli.cli.main import main
from appliance_cli.core import bundlegate
from appliance_cli.core.checks.tls import install_refusals
from appliance_cli.core.siteconfig import load_site
from appliance_cli.errors import BundleError
from tests._support.bundles import BUSYBOX, build, make_profile
from tests._support.paths import EXAMPLE
from tests._support.runai_vendor import make_vendor_tar
from tests._support.tlscerts import make_ca, make_leaf, write_tls

DOMAIN = "runai.acme.example"  # the example's site.domain


@pytest.fixture(scope="module")
def org_ca():
    return make_ca("ACME Root CA")


def _site(tmp: Path, tls: dict[str, str] | None) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    if tls:
        data["site"]["tls"] = tls
    (tmp / "appliance.yml").write_text(yaml.safe_dump(data))
    cfg = load_site(tmp)
    (tmp / "known_hosts").write_text(
        "".join(f"{n.name},{n.address} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake\n" for n in cfg.nodes)
    )
    return tmp


def _install(site: Path, capsys, monkeypatch) -> tuple[int, str]:
    def untouched(*_a, **_k):
        raise AssertionError("the install went on past the refusal")

    monkeypatch.setattr(install_cmd, "make_runner", untouched)
    monkeypatch.setattr(install_cmd.preflight_cmd, "check_site", untouched)
    rc = main(["install", "--site", str(site), "--skip-preflight", "--no-verify-bundle"])
    return rc, capsys.readouterr().err


def test_a_runai_site_without_tls_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    rc, err = _install(_site(tmp_path, None), capsys, monkeypatch)
    assert rc == 2 and "Traceback" not in err
    assert "site.tls: required when scheduler.stack is 'runai'" in err and DOMAIN in err
    assert "hint:" in err and "site.tls {certificate, key, ca}" in err


@pytest.mark.parametrize(
    "case, names, days, other_ca, expect",
    [
        ("another name", ["runai.other.example"], 365, False,
         "site.tls.certificate: tls/runai.crt: issued for runai.other.example, not runai.acme.example"),
        ("another CA", [DOMAIN], 365, True, "site.tls.certificate: tls/runai.crt: not signed by tls/org-ca.crt"),
        ("10 days left", [DOMAIN], 10, False, "site.tls.certificate: tls/runai.crt: expires on "),
    ],
)  # fmt: skip
def test_a_bad_certificate_is_refused_naming_the_field(
    tmp_path: Path, org_ca, capsys, monkeypatch, case, names, days, other_ca, expect
) -> None:
    issuer = make_ca("Some Other CA") if other_ca else org_ca
    cert, key = make_leaf(issuer, names, days=days)
    tls = write_tls(tmp_path, org_ca, cert, key)
    rc, err = _install(_site(tmp_path, tls), capsys, monkeypatch)
    assert rc == 2, (case, err)
    assert expect in err, (case, err)
    assert "Traceback" not in err and "hint:" in err
    assert len([ln for ln in err.splitlines() if ln.startswith("error")]) == 1, err


def test_a_good_certificate_passes_and_other_stacks_are_not_asked(tmp_path: Path, org_ca) -> None:
    cert, key = make_leaf(org_ca, [DOMAIN], days=365)
    cfg = load_site(_site(tmp_path, write_tls(tmp_path, org_ca, cert, key)))
    assert install_refusals(cfg) == []
    open_stack = cfg.model_copy(update={"site": cfg.site.model_copy(update={"tls": None}),
                                        "scheduler": cfg.scheduler.model_copy(update={"stack": "open"})})  # fmt: skip
    assert install_refusals(open_stack) == []


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(a signed bundle without Run:ai, the same with the synthetic 2.9.0 tar imported and
    signed again, the trusted public key)."""
    tmp = tmp_path_factory.mktemp("runai-gate")
    plain = build(tmp, make_profile(tmp, images=[])).path
    priv, pub, _ = keygen(tmp / "key")
    sign_bundle(plain, priv)
    with_runai = tmp / "with-runai"
    shutil.copytree(plain, with_runai)
    import_runai(make_vendor_tar(tmp / "vendor", "2.9.0", BUSYBOX), with_runai)
    sign_bundle(with_runai, priv)
    return plain, with_runai, pub


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)


def test_a_bundle_without_the_vendor_tar_is_refused_naming_the_chart(tmp_path: Path, bundles) -> None:
    plain, _, pub = bundles
    cfg = load_site(_site(tmp_path, None))
    with pytest.raises(BundleError) as ei:
        bundlegate.check(cfg, bundle=str(plain), key=str(pub))
    assert ei.value.exit_code == 4
    assert "no helm-chart/runai-backend artifact" in ei.value.message and "Run:ai 2.9.0" in ei.value.message
    assert "\n" not in ei.value.message
    assert "appliance bundle import-runai runai-2.9.0.tar.gz" in (ei.value.hint or "")


def test_a_bundle_with_another_runai_version_is_refused(tmp_path: Path, bundles) -> None:
    _, with_runai, pub = bundles
    cfg = load_site(_site(tmp_path, None))
    cfg = cfg.model_copy(update={"scheduler": cfg.scheduler.model_copy(update={"version": "2.13.0"})})
    with pytest.raises(
        BundleError, match=re.escape("helm-chart/runai-backend is version 2.9.0, scheduler.version is 2.13.0")
    ):
        bundlegate.check(cfg, bundle=str(with_runai), key=str(pub))


def test_the_imported_vendor_tar_passes_the_gate(tmp_path: Path, bundles) -> None:
    _, with_runai, pub = bundles
    gate = bundlegate.check(load_site(_site(tmp_path, None)), bundle=str(with_runai), key=str(pub))
    assert gate.warning is None
    m, _ = load_manifest(with_runai)
    files = {f.path: f.mode for a in m.artifacts if a.label == "file/runai-2.9.0" for f in a.files}
    # the researcher CLI stays at bin/runai in the runai-<version> artifact (the jumpbox installs it)
    assert files == {"bin/runai": "0755", "bin/runai-adm": "0755", "prepare_installation.sh": "0755"}
    charts = {a.name: a.version for a in m.artifacts if a.kind == "helm-chart"}
    assert charts == {"runai-backend": "2.9.0", "runai-cluster": "2.9.0"}
    refs = sorted(a.image.reference for a in m.artifacts if a.image and "run-ai-prod" in a.image.reference)
    assert len(refs) == 8 and "gcr.io/run-ai-prod/backend:2.9.0" in refs


@pytest.mark.parametrize("name", ["runai-air-gapped-2.13.0.tar", "Run:ai-air-gapped-2.13.0.tar"])
def test_the_guides_update_tar_is_imported_under_the_name_the_gate_looks_for(
    tmp_path: Path, bundles, name: str
) -> None:
    """The appliance guide's update: "Ask for a tar file runai-air-gapped-<new-version>.tar" (the
    seed prints it Run:ai-air-gapped-…). Imported over the 2.9.0 bundle, install's gate takes it
    for scheduler.version 2.13.0; it was file/runai-air-gapped-2.13.0 before, and install exit 4."""
    _, with_runai, _ = bundles
    bundle = tmp_path / "bundle"
    shutil.copytree(with_runai, bundle)
    tar = make_vendor_tar(tmp_path / "vendor", "2.13.0", BUSYBOX).rename(tmp_path / name)
    new = import_runai(tar, bundle)
    assert "file/runai-2.13.0" in {a.label for a in new}
    priv, _, _ = keygen(tmp_path / "key")
    sign_bundle(bundle, priv)
    site = tmp_path / "site"
    site.mkdir()
    cfg = load_site(_site(site, None))
    cfg = cfg.model_copy(update={"scheduler": cfg.scheduler.model_copy(update={"version": "2.13.0"})})
    assert bundlegate.check(cfg, bundle=str(bundle), key=str(tmp_path / "key.pub")).warning is None
    m, _ = load_manifest(bundle)
    assert not [a.label for a in m.artifacts if "air-gapped" in a.label]


@pytest.mark.parametrize("name", ["runai.tar", "Run:ai-latest.tar", "vendor-2.13.0.tar"])
def test_a_tar_without_the_version_in_its_name_is_refused_and_the_bundle_kept(
    tmp_path: Path, bundles, capsys, name: str
) -> None:
    _, with_runai, _ = bundles
    bundle = tmp_path / "bundle"
    shutil.copytree(with_runai, bundle)
    before = (bundle / "manifest.json").read_bytes()
    tar = make_vendor_tar(tmp_path / "vendor", "2.13.0", BUSYBOX).rename(tmp_path / name)
    assert main(["bundle", "import-runai", str(tar), "--into", str(bundle)]) == 4
    err = capsys.readouterr().err
    assert err.startswith(f"error: {name}: no Run:ai version in the file's name\n"), err
    assert "hint: import the tar under the name Run:ai support gave it: runai-<version>.tar" in err
    assert "Traceback" not in err
    assert (bundle / "manifest.json").read_bytes() == before and (bundle / "manifest.sig").exists()
