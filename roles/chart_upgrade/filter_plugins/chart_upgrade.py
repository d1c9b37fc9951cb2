"""Which helm releases `upgrade apply` upgrades: those whose chart the new bundle carries at
another version (or whose last revision did not deploy: an upgrade interrupted half-way).

Pure, so the unit tests need no cluster; helm's `name-version` is read by split_chart
(appliance_cli/rules/helmcharts.py), as the CLI's `upgrade plan` reads it.
"""

from __future__ import annotations

from typing import Any

from appliance_cli.rules.helmcharts import split_chart


def pending(releases: list[dict[str, Any]], bundle_charts: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    """`helm list -A -o json` and the bundle's charts (name -> {version, ...}) -> the releases to
    upgrade, in release-name order (runai-backend before runai-cluster, as the guide does them)."""
    out = []
    for r in releases or []:
        name, version = split_chart(str(r.get("chart") or ""))
        want = str((bundle_charts.get(name) or {}).get("version") or "")
        if not want:
            continue  # a chart the bundle does not carry: not this toolkit's to upgrade
        if version != want or str(r.get("status") or "deployed") != "deployed":
            out.append(
                {
                    "release": str(r["name"]),
                    "namespace": str(r.get("namespace") or "default"),
                    "chart": name,
                    "from": version,
                    "to": want,
                }
            )
    return sorted(out, key=lambda p: (p["release"], p["namespace"]))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"chart_upgrade_pending": pending}
