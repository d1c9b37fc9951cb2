"""The helm role's chart checks on the controller (roles/helm/action_plugins/helm_chart.py, around
the helm_chart module in one task): the bundle carries the chart, and the chart's kubeVersion
admits the cluster's version by helm's rule (appliance_cli/rules/helmcharts.py), checked before
the including role changes anything."""

from __future__ import annotations

import tarfile
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import yaml

from appliance_cli.rules import helmcharts as h
from tests._support.modules import load_file
from tests._support.paths import ROOT

action = load_file(
    "appliance_test_helm_chart_action", ROOT / "roles" / "helm" / "action_plugins" / "helm_chart.py"
)
GPU_OPERATOR = ROOT / "tests" / "fixtures" / "charts" / "gpu-operator-v24.6.2.tgz"


def test_the_real_gpu_operator_chart_accepts_1_23() -> None:
    with tarfile.open(GPU_OPERATOR) as t:
        member = t.extractfile("gpu-operator/Chart.yaml")
        assert member is not None
        meta = yaml.safe_load(member.read())
    assert meta["kubeVersion"] == ">= 1.16.0-0"
    assert h.kube_version_problem(meta, "v1.23.17") == ""


@pytest.mark.parametrize(
    ("constraint", "ok"),
    [
        (">= 1.16.0-0", True),
        (">=1.20.0, <1.25.0", True),
        (">=1.20.0 <1.23.0", False),
        ("~1.23", True),
        ("~1.22", False),
        ("^1.20", True),
        (">=1.28.0-0", False),
        ("<1.20.0 || >=1.23.0", True),
        ("1.23.x", True),
        ("", True),
        # fewer than three parts make a range (Masterminds/semver v3.2.1's "dirty" constraints)
        ("<= 1.23", True),
        ("<= 1.22", False),
        ("> 1.23", False),
        ("> 1.22", True),
        ("~1", True),
        ("1.23", True),
        ("1.22.*", False),
        ("!= 1.23", False),
        ("!= 1", False),
        ("!= 1.23.16", True),
        ("^0.9", False),
        ("1.20 - 1.24", True),
        ("1.24 - 1.25", False),
        ("=> 1.23.17", True),
        ("~> 1.23.0", True),
    ],
)
def test_constraints_as_helm_reads_them(constraint: str, ok: bool) -> None:
    assert (
        h.kube_version_problem({"name": "c", "version": "1", "kubeVersion": constraint}, "v1.23.17") == ""
    ) is ok


def test_an_excluding_chart_is_named_in_helms_words() -> None:
    chart = {"name": "kai-scheduler", "version": "v0.9.0", "kubeVersion": ">=1.28.0-0"}
    assert h.kube_version_problem(chart, "v1.23.17") == (
        "chart kai-scheduler v0.9.0 requires kubeVersion: >=1.28.0-0 which is incompatible with Kubernetes v1.23.17"
    )
    assert "improper constraint: >=one" in h.kube_version_problem(
        {"name": "x", "kubeVersion": ">= one"}, "v1.23.17"
    )
    assert "invalid semantic version" in h.kube_version_problem(
        {"name": "x", "kubeVersion": ">= 1.16"}, "1.23.17.4"
    )


def test_prereleases_by_semver_precedence() -> None:
    def ok(constraint: str, version: str) -> bool:
        return h.kube_version_problem({"name": "c", "kubeVersion": constraint}, version) == ""

    assert ok(">= 1.16.0-0", "v1.23.17-eks-1") and not ok(">= 1.16.0", "v1.23.17-eks-1")
    assert ok(">= 1.23.17-rc.2", "v1.23.17-rc.10") and not ok(">= 1.23.17-rc.10", "v1.23.17-rc.2")
    assert ok(">= 1.23.17-alpha.1", "v1.23.17-beta")
    assert ok("!= 1.23.17", "v1.23.17-eks-1")  # an exact != has no prerelease guard


CHARTS = {
    "gpu-operator": {"url": "http://10.77.0.11:8080/charts/gpu-operator-v24.6.2.tgz", "sha256": "a" * 64}
}
ARGS = {"name": "gpu-operator", "charts": CHARTS, "kubernetes_version": "v1.23.17",
        "chart_dir": "/var/lib/appliance/charts", "values_dir": "/var/lib/appliance/helm-values"}  # fmt: skip


def _run(args: dict[str, Any], module_result: dict[str, Any]) -> tuple[dict[str, Any], mock.Mock]:
    """The action plugin's run() with the module's answer stubbed: (its result, the module call)."""
    task = SimpleNamespace(args=args, async_val=0, check_mode=False, action="helm_chart")
    plugin = action.ActionModule(task, mock.MagicMock(), None, None, None)
    plugin._load_name = "helm_chart"
    with mock.patch.object(plugin, "_execute_module", return_value=dict(module_result)) as module:
        return plugin.run(task_vars={}), module


def _metadata(kube_version: str) -> str:
    return yaml.safe_dump({"name": "gpu-operator", "version": "v24.6.2", "kubeVersion": kube_version})


def test_the_module_gets_the_bundles_url_and_sha256_and_never_the_plugins_own_options() -> None:
    out, module = _run(ARGS, {"changed": False, "path": "/p", "metadata": _metadata(">= 1.16.0-0")})
    assert not out.get("failed") and out["path"] == "/p"
    sent = module.call_args.kwargs["module_args"]
    assert module.call_args.kwargs["module_name"] == "helm_chart"
    assert (sent["url"], sent["sha256"], sent["name"]) == (
        CHARTS["gpu-operator"]["url"],
        "a" * 64,
        "gpu-operator",
    )
    assert "charts" not in sent and "kubernetes_version" not in sent


def test_a_chart_the_bundle_lacks_fails_before_anything_runs_on_the_master() -> None:
    out, module = _run({**ARGS, "name": "kai-scheduler"}, {})
    assert out["failed"] and out["msg"] == (
        "the bundle has no chart 'kai-scheduler' (it has: gpu-operator): build the bundle from a profile whose "
        "charts list it"
    )
    module.assert_not_called()


def test_a_chart_that_excludes_the_clusters_version_fails_in_helms_words() -> None:
    out, _ = _run(ARGS, {"changed": False, "path": "/p", "metadata": _metadata(">=1.28.0-0")})
    assert out["failed"] and out["msg"] == (
        "chart gpu-operator v24.6.2 requires kubeVersion: >=1.28.0-0 which is incompatible with Kubernetes "
        "v1.23.17: use a chart version that supports it (the bundle and this cluster do not fit)"
    )


@pytest.mark.parametrize(
    "module_result",
    [
        {"changed": True, "fetched": True, "metadata": None},  # check mode, the archive not there yet
        {"failed": True, "msg": "The checksum for URL did not match", "appliance_failure": "checksum"},
    ],
)
def test_nothing_to_read_or_a_failed_module_is_passed_on_unchanged(module_result: dict[str, Any]) -> None:
    out, _ = _run(ARGS, module_result)
    assert {k: out[k] for k in module_result} == module_result
