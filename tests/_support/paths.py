"""Paths the tests share."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "example" / "appliance.yml"  # the reference appliance's site config


def e2e_bundle_root() -> Path:
    """Where the e2e tests build their lab bundles, with one build cache (`build-cache`) that the
    molecule lanes share (APPLIANCE_E2E_BUNDLE_ROOT: a build of one's own, where several people
    share the machine's cache)."""
    import os

    from appliance_cli.lab.layout import LabLayout

    return Path(os.environ.get("APPLIANCE_E2E_BUNDLE_ROOT") or LabLayout.default().cache_dir / "e2e-bundle")


def e2e_build_cache() -> Path:
    """The build cache of every lab bundle the suite builds (e2e and molecule lanes alike)."""
    return e2e_bundle_root() / "build-cache"
