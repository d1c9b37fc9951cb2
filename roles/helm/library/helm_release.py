#!/usr/bin/python3
"""One helm release brought to its values in one round trip: the values kept on the master
(0600), the deployed release read (`helm list`, `helm get values`), and `helm upgrade --install`
only when the release differs. Before this module the same took four tasks (copy, two reads, the
command), each a task start on the controller; a no-op run now pays one.
Stdlib only: the values file's YAML text is rendered on the controller (to_nice_yaml, as the
copy task before this module rendered it), the dict beside it is what is compared."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ansible.module_utils.node_files import converge_file

DOCUMENTATION = r"""
module: helm_release
short_description: helm upgrade --install, only when the deployed release differs
description:
  - Writes C(values_text) to C(values_file) (root:root 0600, atomically) when the file differs.
  - Reads the release with C(helm list -a -o json) and C(helm get values -o json), and runs
    C(helm upgrade --install NAME CHART --create-namespace -f VALUES_FILE --timeout Ns) only when the
    release is not deployed, is not in status C(deployed), deploys another chart version (the
    archive's name without C(.tgz) against C(helm list)'s C(chart)), or has other values.
  - A release whose last revision is C(pending-*) was left by a helm that was killed (the site's
    lock keeps two runs apart), and helm refuses any upgrade of it. A pending upgrade or rollback is
    rolled back to the revision before it (C(helm rollback NAME)), a pending install uninstalled,
    and the release is then installed or upgraded as wanted.
  - In check mode it reads, writes nothing and runs no upgrade; C(changed) says what a run would do.
options:
  name: {type: str, required: true, description: The release (a DNS-1123 label of at most 53 characters).}
  namespace: {type: str, required: true, description: Its namespace (a DNS-1123 label).}
  chart_path: {type: path, required: true, description: The chart archive on the master (C(NAME-VERSION.tgz)).}
  values: {type: dict, required: true, description: The release's values, compared with the deployed ones.}
  values_text: {type: str, required: true, description: The same values as YAML (to_nice_yaml), the file's text.}
  values_file: {type: path, required: true, description: Where the values are kept.}
  kubeconfig: {type: path, required: true, description: The admin kubeconfig helm uses.}
  timeout: {type: int, required: true, description: Seconds helm may take (its --timeout).}
"""

RETURN = r"""
reason: {description: Why the release was (or would be) upgraded; empty when it was not., type: str}
values_changed: {description: Whether the kept values file was (or would be) rewritten., type: bool}
"""

# What a killed helm leaves (pkg/release/status.go, v3.14.4): helm's upgrade refuses a release in
# one with "another operation (install/upgrade/rollback) is in progress" (pkg/action/upgrade.go).
PENDING = ("pending-install", "pending-upgrade", "pending-rollback")
# helm's own limit for release names (53: the names it derives must stay within 63).
RELEASE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?")
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def upgrade_reason(
    deployed: dict[str, Any] | None, chart: str, deployed_values: Any, values: dict[str, Any]
) -> str:
    """Why the release must be installed or upgraded ('' when it is as wanted). `deployed` is the
    release's entry in `helm list -o json`, `chart` the archive's NAME-VERSION."""
    if deployed is None:
        return "not deployed"
    if deployed.get("status") != "deployed":
        return f"status {deployed.get('status')}"
    if deployed.get("chart") != chart:
        return f"chart {deployed.get('chart')} deployed, {chart} wanted"
    if (deployed_values or {}) != values:
        return "other values deployed"
    return ""


def _helm(module: Any, *argv: str) -> str:
    p = module.params
    cmd = ["helm", "--kubeconfig", p["kubeconfig"], "-n", p["namespace"], *argv]
    rc, out, err = module.run_command(cmd)
    if rc != 0:
        module.fail_json(
            msg=f"helm {argv[0]} failed (rc {rc}): {err.strip() or out.strip()}", rc=rc, stderr=err
        )
    return out


def unstick(module: Any, release: dict[str, Any]) -> dict[str, Any] | None:
    """A release a killed helm left pending, made one helm acts on again: rolled back to the
    revision before (an upgrade or rollback), or uninstalled (an install, which has none). Returns
    its list entry as a pending one that still needs the upgrade (None: not installed). In check
    mode nothing is done: the entry as it is says why a run would act."""
    if module.check_mode:
        return release
    name, status = module.params["name"], release.get("status")
    if status == "pending-install" or int(release.get("revision") or 1) <= 1:
        _helm(module, "uninstall", name)
        return None
    _helm(module, "rollback", name)
    return {**release, "status": f"{status}, rolled back (a helm was killed mid-way)"}


def converge(module: Any) -> dict[str, Any]:
    p = module.params
    for field, pattern in (("name", RELEASE_NAME), ("namespace", NAMESPACE)):
        if not pattern.fullmatch(p[field]):
            module.fail_json(msg=f"helm release {field} {p[field]!r} is not a DNS-1123 label helm accepts")
    values = p["values"] or {}
    text = p["values_text"]
    path = p["values_file"]
    diff = converge_file(path, text, 0o600, module.check_mode)  # root:root 0600
    values_changed = diff is not None

    listed = json.loads(_helm(module, "list", "-a", "-o", "json") or "[]")  # -a: pending ones too
    deployed = next((r for r in listed if r.get("name") == p["name"]), None)
    deployed_values = None
    if deployed is not None and deployed.get("status") in PENDING:
        deployed = unstick(module, deployed)
    if deployed is not None:
        deployed_values = json.loads(_helm(module, "get", "values", p["name"], "-o", "json") or "null")
    chart = re.sub(r"\.tgz$", "", os.path.basename(p["chart_path"]))
    reason = upgrade_reason(deployed, chart, deployed_values, values)
    if reason and not module.check_mode:
        _helm(module, "upgrade", "--install", p["name"], p["chart_path"], "--create-namespace",
              "-f", path, "--timeout", f"{p['timeout']}s")  # fmt: skip
    result: dict[str, Any] = {"changed": bool(reason) or values_changed, "reason": reason,
                              "values_changed": values_changed}  # fmt: skip
    if module._diff and diff:
        result["diff"] = diff
    return result


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "namespace": {"type": "str", "required": True},
            "chart_path": {"type": "path", "required": True},
            "values": {"type": "dict", "required": True},
            "values_text": {"type": "str", "required": True},
            "values_file": {"type": "path", "required": True},
            "kubeconfig": {"type": "path", "required": True},
            "timeout": {"type": "int", "required": True},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**converge(module))
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"helm release {module.params['name']}: {exc}")


if __name__ == "__main__":
    main()
