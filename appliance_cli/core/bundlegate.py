"""The install gate: nothing is installed from a bundle the controller has not verified.

`appliance install` re-hashes every blob of the bundle on the stick and checks its signature
against the trusted key before the first playbook runs; the manifest digest it verified is
passed to the master, whose copy step refuses any other manifest (another stick, a copy
tampered with after verification).
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
    cfg: SiteConfig, bundle: str | None = None, key: str | None = None, skip: bool = False
) -> GateResult:
    """Verify the site's bundle (BundleError naming the bad artifact otherwise)."""
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
    report = verify_bundle(root, key=pub, require_signature=cfg.bundle.require_signature)
    hexd = report.manifest_digest.removeprefix("sha256:")
    signed = f"signed by {report.key_id}" if report.signature_checked else "signature NOT checked"
    warning = None
    if not report.signature_checked:
        warning = f"bundle {root}: blobs verified but the signature was not checked (bundle.require_signature: false)"
    return GateResult(
        extravars={"appliance_bundle_manifest_sha256": hexd},
        summary=(
            f"bundle {root} verified: profile {report.profile}, {report.artifacts} artifacts, "
            f"{report.bytes / 2**20:.1f} MiB in {report.seconds:.1f}s, {signed}"
        ),
        warning=warning,
    )
