"""Files of a site directory other than appliance.yml itself: the skeleton `appliance init` writes."""

from __future__ import annotations

from pathlib import Path

from appliance_cli.content import templates_dir
from appliance_cli.core.siteconfig import SITE_FILE
from appliance_cli.errors import UsageError
from appliance_cli.fsutil import atomic_write


def write_skeleton(site_dir: Path, force: bool = False) -> Path:
    target = site_dir / SITE_FILE
    if target.exists() and not force:
        raise UsageError(f"{target} already exists", hint="pass --force to overwrite it")
    site_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(target, (templates_dir() / "site" / "appliance.yml").read_text())
    return target
