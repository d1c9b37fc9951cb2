"""A chart's `kubeVersion` constraint checked against the cluster's version, as helm checks it
before installing anything. Runs on the controller, so an excluded chart is refused before the
role changes anything. The rule lives in appliance_cli/rules/helmcharts.py, which `appliance
upgrade plan` reads too; tested in tests/unit/test_helm_role.py."""

from __future__ import annotations

from typing import Any

from appliance_cli.rules.helmcharts import kube_version_problem


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"helm_kube_version_problem": kube_version_problem}
