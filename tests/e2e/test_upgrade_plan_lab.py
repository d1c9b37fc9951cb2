"""`appliance upgrade plan` on the installed lab, against the bundle it was installed from: the
bundle verified, the cluster read (kubeadm-config, kubelets, helm releases), nothing to upgrade."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.usefixtures("installs")


def test_the_bundle_the_lab_runs_has_nothing_to_upgrade(site, cli, request):
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("a real site: its own bundle is not known here")
    bundle = request.getfixturevalue("lab_bundle")
    r = cli(
        "upgrade",
        "plan",
        "--site",
        str(site.site_dir),
        "--bundle",
        str(bundle.path),
        "--key",
        str(bundle.public_key),
    )
    assert r.rc == 0, r.err
    assert f"{site.site.name}: nothing to upgrade: every component is at the bundle's version" in r.out
