"""Which helm releases `upgrade apply` upgrades: those whose chart the new bundle carries at
another version (or whose last revision did not deploy: an upgrade that failed, or one a killed
helm left pending, which helm refuses to upgrade until it is rolled back).

Pure, so the unit tests need no cluster; helm's `name-version` is read by split_chart
(appliance_cli/rules/helmcharts.py), as the CLI's `upgrade plan` reads it.
"""

from __future__ import annotations

from typing import Any

from appliance_cli.rules.helmcharts import split_chart

# `helm list -a`'s statuses (pkg/release/status.go, helm v3.14.4) of a release gone: not upgraded
GONE = ("uninstalled", "uninstalling")
# what a killed helm leaves: helm's upgrade refuses the release until it is rolled back
STUCK = ("pending-upgrade", "pending-rollback")


def pending(releases: list[dict[str, Any]], bundle_charts: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    """`helm list -A -a -o json` and the bundle's charts (name -> {version, ...}) -> the releases
    to upgrade, in release-name order (runai-backend before runai-cluster, as the guide does them).
    `rollback` is true for one a killed helm left pending: it is rolled back first."""
    out = []
    for r in releases or []:
        name, version = split_chart(str(r.get("chart") or ""))
        want = str((bundle_charts.get(name) or {}).get("version") or "")
        status = str(r.get("status") or "deployed")
        if not want or status in GONE:
            continue  # a chart the bundle does not carry (not this toolkit's), or a release gone
        if version != want or status != "deployed":
            out.append(
                {
                    "release": str(r["name"]),
                    "namespace": str(r.get("namespace") or "default"),
                    "chart": name,
                    "from": version,
                    "to": want,
                    "rollback": status in STUCK,
                }
            )
    return sorted(out, key=lambda p: (p["release"], p["namespace"]))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"chart_upgrade_pending": pending}
