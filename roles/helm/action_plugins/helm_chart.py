"""The helm_chart task's checks that belong on the controller, around the module in one task
start (they were two assert tasks around it, one task start each per chart on every run):

* before anything on the master: the bundle carries the chart (`charts`, the bundle's charts by
  name; the url and sha256 the module gets come from it);
* after `helm show chart`: the chart's `kubeVersion` admits `kubernetes_version`, as helm checks
  it before installing anything (the rule is appliance_cli/rules/helmcharts.py, which `appliance
  upgrade plan` reads too), so an excluded chart is refused before the including role changes
  anything.

The rest is library/helm_chart.py, unchanged (its options are the module's; `charts` and
`kubernetes_version` are this plugin's and never reach the node)."""

from __future__ import annotations

from typing import Any

import yaml
from ansible.plugins.action import ActionBase

from appliance_cli.rules.helmcharts import kube_version_problem

OWN_ARGS = ("charts", "kubernetes_version")
# The task's options: the module's (url and sha256 aside, which come from `charts`) and OWN_ARGS.
SPEC: dict[str, dict[str, Any]] = {
    "name": {"type": "str", "required": True},
    "charts": {"type": "dict", "required": True},
    "kubernetes_version": {"type": "str", "required": True},
    "chart_dir": {"type": "path", "required": True},
    "values_dir": {"type": "path", "required": True},
    "show_values": {"type": "bool", "default": False},
    "timeout": {"type": "int", "default": 60},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(SPEC)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=SPEC)
        name, charts = args["name"], args["charts"]
        if name not in charts:
            return {
                **result,
                "failed": True,
                "msg": f"the bundle has no chart '{name}' (it has: {', '.join(sorted(charts)) or 'none'}): "
                "build the bundle from a profile whose charts list it",
            }
        chart = charts[name] if isinstance(charts[name], dict) else {}
        module_args = {k: v for k, v in args.items() if k not in OWN_ARGS}
        module_args |= {"url": str(chart.get("url", "")), "sha256": str(chart.get("sha256", ""))}
        result |= self._execute_module(module_name="helm_chart", module_args=module_args, task_vars=task_vars)
        if result.get("failed") or result.get("metadata") is None:
            return result  # check mode before the archive is there: nothing to read yet
        problem = kube_version_problem(yaml.safe_load(result["metadata"]) or {}, args["kubernetes_version"])
        if problem:
            return {
                **result,
                "failed": True,
                "msg": f"{problem}: use a chart version that supports it (the bundle and this cluster do not fit)",
            }
        return result
