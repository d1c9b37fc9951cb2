"""What `appliance upgrade` reads from the running site: what is installed (kubectl and helm on the
master, dpkg on each node) for the plan, and after apply the upgrade's state file on the master.
upgradeplan stays pure; this module asks. No printing."""

from __future__ import annotations

import json
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance_cli.core import cluster, opstate, upgradeplan
from appliance_cli.core.paths import PATHS
from appliance_cli.core.remote import read_if_there, run_on
from appliance_cli.core.siteconfig import SiteConfig
from appliance_cli.errors import ApplianceError

# Where the kube_upgrade and chart_upgrade roles keep the upgrade's state on the master (each its
# own key, core/opstate.py), and where chart_upgrade saves each release's values before its
# upgrade (roles/appliance_paths, their defaults' source).
STATE_FILE = PATHS.upgrade_state
CHART_VALUES_DIR = PATHS.upgrade_values


@dataclass(frozen=True)
class Applied:
    """The state file after `upgrade apply`."""

    snapshot: str  # the etcd snapshot taken before the upgrade, on the master ("" if none)
    charts: dict[str, str]  # namespace/release -> "chart from -> to"


def plan(cfg: SiteConfig, bundle: Path) -> upgradeplan.Plan:
    """The plan from what is installed to what the (already verified) bundle carries."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    target = upgradeplan.target_of(manifest, upgradeplan.chart_metadata(bundle, manifest))
    target.containerd = upgradeplan.containerd_of(bundle, manifest)
    return upgradeplan.plan_upgrade(cfg, installed(cfg), target)


def installed(cfg: SiteConfig) -> upgradeplan.Installed:
    def kubectl_json(a: list[str]) -> Any:
        return _json(cluster.kubectl(cfg, [*a, "-o", "json"], timeout=120), f"kubectl {shlex.join(a)}")

    def helm_json(a: list[str]) -> Any:
        out = run_on(
            cfg, cfg.master, ["helm", "--kubeconfig", cluster.ADMIN_CONF, *a, "-o", "json"], timeout=120
        )
        return _json(out, f"helm {shlex.join(a)}")

    found = upgradeplan.installed_from(kubectl_json, helm_json)
    found.runtimes = runtimes(cfg)
    return found


def runtimes(cfg: SiteConfig) -> dict[str, tuple[str, str]]:
    """Each node's containerd package version and codename (dpkg, over SSH, a few nodes at once)."""
    if cfg.kubernetes.container_runtime != upgradeplan.RUNTIME_PACKAGE:
        return {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = pool.map(lambda n: run_on(cfg, n, upgradeplan.RUNTIME_PROBE, timeout=60), cfg.nodes)
        return upgradeplan.runtimes_from(dict(zip([n.name for n in cfg.nodes], answers, strict=True)))


def read_state(cfg: SiteConfig) -> opstate.UpgradeState:
    """The upgrade's state on the master (empty when there is none; StateFileError when unusable)."""
    text = run_on(cfg, cfg.master, read_if_there(STATE_FILE), timeout=60)
    return opstate.parse_upgrade(text, STATE_FILE, cfg.master.name)


def applied(cfg: SiteConfig) -> Applied:
    state = read_state(cfg)
    kube, charts = state.kube_upgrade, state.chart_upgrade
    # charts recorded for another target are an earlier upgrade's (this one moved none)
    return Applied(kube.snapshot, dict(charts.charts) if charts.target == kube.target else {})


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text or "null")
    except json.JSONDecodeError:
        raise ApplianceError(f"{what}: no JSON in its answer") from None
