"""Which helm releases `upgrade apply` upgrades: those whose chart the new bundle carries at
another version (or whose last revision did not deploy: an upgrade interrupted half-way).

Pure, so the CLI's `upgrade plan` reads helm's `name-version` the same way (its core/upgradeplan.py
loads this file by path) and the unit tests need no cluster.
"""

from __future__ import annotations

import re
from typing import Any

_CHART = re.compile(r"(.*)-(v?\d[^-]*(?:-[0-9A-Za-z.]+)?)")


def split_chart(chart: str) -> tuple[str, str]:
    """helm list's `chart` (name-version) -> (name, version); (chart, '') when there is no version."""
    m = _CHART.fullmatch(chart or "")
    return (m.group(1), m.group(2)) if m else (chart or "", "")


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
