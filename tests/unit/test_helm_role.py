"""The helm role's kubeVersion check (roles/helm/filter_plugins/helm_kube_version.py): helm's
rule, applied before the including role changes anything."""

from __future__ import annotations

import tarfile

import pytest
import yaml

from tests._support.modules import load_file
from tests._support.paths import ROOT

h = load_file("helm_kube_version", ROOT / "roles" / "helm" / "filter_plugins" / "helm_kube_version.py")
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
    assert "invalid semantic version" in h.kube_version_problem(
        {"name": "x", "kubeVersion": ">= one"}, "v1.23.17"
    )
