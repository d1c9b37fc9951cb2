"""The install gate: nothing is installed from a bundle the controller has not verified.

Before the first playbook runs, `appliance install` checks the bundle's signature against the
trusted key, the manifest, every root file against the digest the manifest records, and that
every blob is there with its size. It does not re-hash the blobs: the master's copy step
(bundle_sync) hashes each blob as it copies it and refuses one that differs from the signed
manifest, so the stick is read once, not twice. The manifest digest verified here is passed to
the master, whose copy step refuses any other manifest (another stick, a copy tampered with
after verification). `appliance bundle verify` re-hashes everything, on demand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from appliance_cli.core.siteconfig import SiteConfig
from appliance_cli.errors import BundleError


@dataclass(frozen=True)
class GateResult:
    extravars: dict[str, str]
    summary: str  # one line for the user
    warning: str | None = None


def bundle_dir(cfg: SiteConfig, override: str | None) -> Path:
    return Path(override).expanduser() if override else cfg.resolve(cfg.bundle.source)


def trusted_key(cfg: SiteConfig, override: str | None) -> Path | None:
    """--key, then $APPLIANCE_BUNDLE_PUBKEY, then the site config's bundle.public_key."""
    from appliance_cli.bundle.verify import KEY_ENV  # the bundle package is heavy: not at CLI start-up

    if override:
        return Path(override).expanduser()
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV]).expanduser()
    if cfg.bundle.public_key:
        return cfg.resolve(cfg.bundle.public_key)
    return None


def check(
    cfg: SiteConfig,
    bundle: str | None = None,
    key: str | None = None,
    skip: bool = False,
    upgrade: bool = False,
) -> GateResult:
    """Verify the site's bundle (BundleError naming the bad artifact otherwise). Unless it is
    the bundle of an upgrade, it must carry the site's Kubernetes version (no silent downgrade)."""
    from appliance_cli.bundle.verify import KEY_ENV, verify_bundle

    if skip:
        return GateResult(
            extravars={},
            summary="bundle NOT verified (--no-verify-bundle)",
            warning="installing from an unverified bundle: --no-verify-bundle was given",
        )
    root = bundle_dir(cfg, bundle)
    if not (root / "manifest.json").is_file():
        raise BundleError(
            f"no bundle at {root} (manifest.json missing)",
            hint="mount the USB stick there or pass --bundle DIR; --no-verify-bundle uses the master's "
            "copy unverified",
        )
    pub = trusted_key(cfg, key)
    if pub is None and cfg.bundle.require_signature:
        raise BundleError(
            f"{root}: no trusted public key to check the bundle's signature with",
            hint=f"pass --key PUB, set ${KEY_ENV}, or set bundle.public_key in the site config",
        )
    report = verify_bundle(root, key=pub, require_signature=cfg.bundle.require_signature, hash_blobs=False)
    scheduler_artifacts(cfg, root)
    if not upgrade:
        kubernetes_binaries(cfg, root)
    hexd = report.manifest_digest.removeprefix("sha256:")
    signed = f"signed by {report.key_id}" if report.signature_checked else "signature NOT checked"
    warning = None
    if not report.signature_checked:
        warning = f"bundle {root}: the signature was not checked (bundle.require_signature: false)"
    return GateResult(
        extravars={"appliance_bundle_manifest_sha256": hexd},
        summary=(
            f"bundle {root}: manifest {signed}, {report.artifacts} artifacts complete "
            f"({report.bytes / 2**20:.1f} MiB, profile {report.profile}); each blob is hashed as it is "
            "copied to the master"
        ),
        warning=warning,
    )


# What `bundle import-runai` adds from the vendor's runai-<version> tar, and the role installs.
RUNAI_CHARTS = ("runai-backend", "runai-cluster")


def scheduler_artifacts(cfg: SiteConfig, root: Path) -> None:
    """A Run:ai site needs the vendor's tar in the bundle: the runai-backend and runai-cluster
    charts of scheduler.version and the runai-<version> files (runai-adm). BundleError naming
    the first missing artifact otherwise. Nothing to check for the other stacks."""
    from appliance_cli.bundle import load_manifest

    if cfg.scheduler.stack != "runai":
        return
    version = cfg.scheduler.version or ""
    manifest, _ = load_manifest(root)
    have = {(a.kind, a.name): a.version or "" for a in manifest.artifacts}
    hint = (
        f"import the vendor's tar: appliance bundle import-runai runai-{version or 'VERSION'}.tar.gz "
        f"--into {root}, then sign the bundle again (appliance bundle sign)"
    )
    for chart in RUNAI_CHARTS:
        found = have.get(("helm-chart", chart))
        if found is None:
            raise BundleError(
                f"{root}: no helm-chart/{chart} artifact: scheduler.stack is 'runai' and the bundle "
                f"does not carry Run:ai {version} (its vendor tar)",
                hint=hint,
            )
        if found != version:
            raise BundleError(
                f"{root}: helm-chart/{chart} is version {found}, scheduler.version is {version}",
                hint=f"set scheduler.version: {found!r} in the site config, or {hint}",
            )
    if ("file", f"runai-{version}") not in have:
        raise BundleError(
            f"{root}: no file/runai-{version} artifact (runai-adm, the researcher CLI): the bundle "
            f"does not carry Run:ai {version}'s files",
            hint=hint,
        )


def kubernetes_binaries(cfg: SiteConfig, root: Path) -> None:
    """The bundle must carry kubeadm, kubelet and kubectl of kubernetes.version: an install from
    the stick the site was installed with, after `upgrade apply` moved it on, would put the old
    binaries back. A bundle without Kubernetes binaries (a partial test bundle) is not judged."""
    import json

    from appliance_cli.core.upgradeplan import KUBE_TOOLS, clean, target_of

    manifest = json.loads((root / "manifest.json").read_text())
    carried = target_of(manifest, {}).kubernetes
    tools = [
        a for a in manifest.get("artifacts") or [] if Path(a.get("install_path") or "").name in KUBE_TOOLS
    ]
    if not tools or clean(cfg.kubernetes.version) in carried:
        return
    has = ", ".join(carried) or "no complete set"
    raise BundleError(
        f"{root}: carries Kubernetes {has}, the site runs {cfg.kubernetes.version} (kubernetes.version): "
        "installing it would replace the cluster's kubeadm, kubelet and kubectl",
        hint="use the bundle the site was installed or last upgraded with; a newer one goes through "
        "`appliance upgrade plan|apply --bundle DIR`",
    )
