"""`appliance upgrade plan` on the installed lab, against the bundle it was installed from: the
bundle verified, the cluster read (kubeadm-config, kubelets, helm releases, each node's containerd),
nothing to upgrade: every node's containerd is the one the bundle's apt repository carries."""

from __future__ import annotations

import json
import os
import re

import pytest

from appliance_cli.core.upgradeplan import containerd_of

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
    (containerd,) = containerd_of(
        bundle.path, json.loads((bundle.path / "manifest.json").read_text())
    ).values()
    for node in site.nodes:
        assert re.search(
            rf"^  containerd \({node.name}\) +{re.escape(containerd)} \(unchanged\)$", r.out, re.M
        ), r.out
