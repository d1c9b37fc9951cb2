"""The real flannel CNI plugin, as the lab's flannel-cni-plugin image carries it at /flannel, for the
tests that run it outside the lab. Its pin has one home: the image's `add_from_deb` in
bundles/profiles/lab.yml (Debian 11's containernetworking-plugins 0.9.0). The package is fetched
once, checked against that sha256, and the plugin is written to build/flannel-cni/flannel.
scripts/bootstrap.sh runs `python -m tests._support.real_flannel`. Without it the tests that need
the plugin fetch it themselves, and they fail if they cannot."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from appliance_cli.bundle.fetch import fetch
from appliance_cli.debian.debdir import read_files
from appliance_cli.fsutil import atomic_write

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "build" / "flannel-cni"
IMAGE = "flannel-cni-plugin"


def pin() -> dict:
    """The flannel-cni-plugin image's add_from_deb: url, sha256, files."""
    prof = yaml.safe_load((REPO / "bundles/profiles/lab.yml").read_text())
    return next(i for i in prof["images"] if i["name"] == IMAGE)["add_from_deb"]


def plugin() -> Path:
    """build/flannel-cni/flannel, fetched and unpacked the first time."""
    out = OUT / "flannel"
    p = pin()
    stamp = OUT / "sha256"
    if out.is_file() and stamp.is_file() and stamp.read_text() == p["sha256"]:
        return out
    OUT.mkdir(parents=True, exist_ok=True)
    deb = fetch(p["url"], p["sha256"], OUT / "cache", f"oci-image/{IMAGE}")
    [member] = p["files"]  # the one file, /flannel
    data, _mode = read_files(deb, [member], f"oci-image/{IMAGE}")[member]
    atomic_write(out, data, mode=0o755)
    atomic_write(stamp, p["sha256"].encode())
    return out


if __name__ == "__main__":
    had = (OUT / "flannel").is_file()
    path = plugin()
    if not had:
        print(f"bootstrap: the real flannel CNI plugin from {pin()['url'].rsplit('/', 1)[-1]} -> {path}")
    sys.exit(0)
