"""What `appliance acceptance` plans for a site (TR-4858 applies or is refused, naming each
difference), the pods -> GPUs-per-project reading, the smoke check, the Job manifests of both
stacks (valid Kubernetes 1.23 objects) and the parsing of what kubectl returns."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from appliance_cli.core.acceptance import kube
from appliance_cli.core.acceptance.compare import observe, pod_gpus
from appliance_cli.core.acceptance.manifests import job_manifest, private_image, project_namespace
from appliance_cli.core.acceptance.model import Job, SmokeJob
from appliance_cli.core.acceptance.plan import build_plan, tr4858_differences
from appliance_cli.core.acceptance.smoke import SMOKE_JOBS, SmokeOutcome, check_smoke
from appliance_cli.core.acceptance.tr4858 import SCENARIOS
from appliance_cli.errors import UsageError
from tests._support.acceptance_sites import example, tr4858_site


# ---- plan ----
def test_the_example_site_runs_the_smoke_jobs_and_says_why_not_tr4858() -> None:
    plan = build_plan(example())
    assert plan.smoke == SMOKE_JOBS and plan.smoke_project == "team-a"
    assert [s.name for s in plan.scenarios] == ["4.8", "4.9", "4.10"]
    assert plan.refused == {
        "tr4858": "the site has 12 GPUs (TR-4858: 16); team-d has a quota of 4 (TR-4858: 8)"
    }


def test_a_tr4858_site_runs_everything() -> None:
    plan = build_plan(tr4858_site())
    assert plan.refused == {} and len(plan.scenarios) == 3


def test_each_difference_is_named() -> None:
    cfg = example(projects=[{"name": "team-a", "gpus": 4, "over_quota": False}, {"name": "ml", "gpus": 2}])
    assert tr4858_differences(cfg) == [
        "the site has 12 GPUs (TR-4858: 16)",
        "team-a may not go over its quota (TR-4858's projects do)",
        "no project team-b (TR-4858: quota 2)",
        "no project team-c (TR-4858: quota 2)",
        "no project team-d (TR-4858: quota 8)",
        "other projects hold quota: ml (TR-4858: team-a..team-d only)",
    ]
    # the cluster's count, when known, is what decides
    assert tr4858_differences(tr4858_site(), cluster_gpus=24) == ["the cluster reports 24 GPUs (TR-4858: 16)"]


def test_a_later_scenario_brings_the_ones_it_starts_from() -> None:
    cfg = tr4858_site()
    assert [s.name for s in build_plan(cfg, "4.10").scenarios] == ["4.8", "4.9", "4.10"]
    assert [s.name for s in build_plan(cfg, "4.9").scenarios] == ["4.8", "4.9"]
    assert build_plan(cfg, "4.8").smoke == () and build_plan(cfg, "smoke").scenarios == ()
    with pytest.raises(UsageError, match=r"unknown scenario '4\.11'"):
        build_plan(cfg, "4.11")


def test_no_projects_no_smoke() -> None:
    plan = build_plan(example(projects=[]), "smoke")
    assert "no scheduler.projects" in plan.refused["smoke"]


def test_no_usable_stack_refuses_everything() -> None:
    plan = build_plan(example(stack="none", projects=[]))
    assert plan.refused["stack"] == "scheduler.stack is 'none': acceptance submits through runai or open"


# ---- pods -> GPUs per project ----
def pod(project: str, *, gpus: Any = None, fraction: str | None = None, hami_pct: int | None = None,
        node: str = "gpu1", phase: str = "Running", deleting: bool = False) -> dict[str, Any]:  # fmt: skip
    limits: dict[str, Any] = {}
    if gpus is not None:
        limits["nvidia.com/gpu"] = gpus
    if hami_pct is not None:
        limits["nvidia.com/gpumem-percentage"] = hami_pct
    meta: dict[str, Any] = {"name": f"p-{project}", "labels": {"acceptance.appliance/project": project}}
    if fraction:
        meta["annotations"] = {"gpu-fraction": fraction}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "gpu", "resources": {"limits": limits}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_gpus_of_a_pod_per_stack() -> None:
    assert pod_gpus(pod("a", gpus="2")) == 2
    assert pod_gpus(pod("a", fraction="0.6")) == 0.6  # Run:ai
    assert pod_gpus(pod("a", gpus=1, hami_pct=40)) == pytest.approx(0.4)  # HAMi
    assert pod_gpus(pod("a")) == 0


def test_observe_counts_bound_pods_and_queues_the_rest() -> None:
    pods = [
        pod("team-a", gpus=2),
        pod("team-a", gpus=1, node="", phase="Pending"),  # waits for its scheduler
        pod("team-b", fraction="0.6"),
        pod("team-b", fraction="0.4", phase="Pending"),  # bound, pulling its image: holds its share
        pod("team-c", gpus=1, hami_pct=50),
        pod("team-d", gpus=4, deleting=True),  # preempted / deleted: released
        pod("team-d", gpus=1, phase="Succeeded"),
    ]
    o = observe(pods, ["team-a", "team-b", "team-c", "team-d"])
    assert o.allocated == pytest.approx({"team-a": 2, "team-b": 1, "team-c": 0.5, "team-d": 0})
    assert o.queued == {"team-a": 1, "team-b": 0, "team-c": 0, "team-d": 0}


# ---- smoke ----
SMI = "+---+\n| NVIDIA-SMI 550.90.07 |\n+---+\nNVIDIA A100-PCIE-40GB, {mib}\n"


def test_smoke_passes_with_half_the_memory_for_half_a_gpu() -> None:
    whole, half = SMOKE_JOBS
    v = check_smoke([SmokeOutcome(half, "Succeeded", SMI.format(mib=20240)),
                     SmokeOutcome(whole, "Succeeded", SMI.format(mib=40960))])  # fmt: skip
    assert [x.passed for x in v] == [True, True]
    assert "20240 of 40960 MiB (49%, expected 50%)" in v[1].message


def test_smoke_fails_a_fraction_that_sees_the_whole_gpu_and_a_job_that_did_not_finish() -> None:
    whole, half = SMOKE_JOBS
    v = check_smoke([SmokeOutcome(whole, "Succeeded", SMI.format(mib=40960)),
                     SmokeOutcome(half, "Succeeded", SMI.format(mib=40960))])  # fmt: skip
    assert [x.passed for x in v] == [True, False]
    v = check_smoke([SmokeOutcome(whole, "Pending after 300s (timed out)", "")])
    assert not v[0].passed and "ended Pending after 300s" in v[0].message
    v = check_smoke([SmokeOutcome(whole, "Succeeded", "no devices were found\n")])
    assert not v[0].passed and "showed 0 GPUs" in v[0].message


# ---- manifests ----
JOBS: list[Job | SmokeJob] = [SMOKE_JOBS[0], SMOKE_JOBS[1],
                              *(st.action for st in SCENARIOS[0].steps if isinstance(st.action, Job))]  # fmt: skip


@pytest.mark.parametrize("stack", ["runai", "open"])
def test_manifests_are_valid_kubernetes_1_23_jobs(stack: str) -> None:
    for job in JOBS:
        m = job_manifest(stack, "master1:5000", "r1", "team-b", job)
        kubernetes_validate.validate(m, "1.23", strict=True)
        pod_spec = m["spec"]["template"]["spec"]
        assert pod_spec["containers"][0]["image"] == "master1:5000/nvidia/cuda:12.6.1-base-ubi8"
        assert m["metadata"]["name"] == f"acceptance-{job.name}"


def test_runai_manifest() -> None:
    frac = Job("team-b", "b-1-g06", 0.6, interactive=True)
    m = job_manifest("runai", "r:5000", "r1", "team-b", frac)
    tpl = m["spec"]["template"]
    assert m["metadata"]["namespace"] == "runai-team-b"
    assert tpl["spec"]["schedulerName"] == "runai-scheduler"
    assert tpl["metadata"]["annotations"] == {"gpu-fraction": "0.6"}
    assert tpl["metadata"]["labels"]["project"] == "team-b"
    assert tpl["metadata"]["labels"]["priorityClassName"] == "build"
    assert "resources" not in tpl["spec"]["containers"][0]  # a fraction asks no nvidia.com/gpu
    whole = job_manifest("runai", "r:5000", "r1", "team-b", Job("team-b", "b-4-gg", 2))
    assert whole["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": 2}
    }
    assert pod_gpus({"metadata": tpl["metadata"], "spec": tpl["spec"]}) == 0.6


def test_open_manifest() -> None:
    m = job_manifest("open", "r:5000", "r1", "team-c", Job("team-c", "c-2-g03", 0.3, interactive=True))
    tpl = m["spec"]["template"]
    assert m["metadata"]["namespace"] == "project-team-c" == project_namespace("open", "team-c")
    assert tpl["spec"]["schedulerName"] == "volcano"
    assert tpl["metadata"]["annotations"] == {
        "scheduling.volcano.sh/queue-name": "team-c",
        "volcano.sh/preemptable": "false",
    }
    limits = tpl["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 30}
    assert pod_gpus({"metadata": tpl["metadata"], "spec": tpl["spec"]}) == pytest.approx(0.3)


def test_private_image_and_refusals() -> None:
    assert private_image("nvcr.io/nvidia/cuda:1", "m:5000") == "m:5000/nvidia/cuda:1"
    assert private_image("busybox:1", "m:5000") == "m:5000/busybox:1"
    with pytest.raises(UsageError):
        project_namespace("none", "team-a")
    with pytest.raises(UsageError, match="whole number"):
        job_manifest("runai", "r:5000", "r1", "team-a", Job("team-a", "x", 1.5))


# ---- what kubectl returns ----
def test_gpu_allocatable_and_stack_objects() -> None:
    doc = {"items": [{"metadata": {"name": "gpu1"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}},
                     {"metadata": {"name": "gpu2"}, "status": {"allocatable": {"cpu": "8"}}}]}  # fmt: skip
    assert kube.gpu_allocatable_of(doc) == {"gpu1": 4.0, "gpu2": 0.0}
    names = {"customresourcedefinition.apiextensions.k8s.io/projects.run.ai", "namespace/runai-team-a"}
    assert kube.stack_missing_of("runai", ["team-a", "team-b"], names) == [
        "namespace runai-team-b (project team-b)"
    ]
    assert kube.stack_missing_of("open", ["team-a"], {"namespace/project-team-a"}) == [
        "queues.scheduling.volcano.sh",
        "hami-device-plugin",
        "Volcano queue team-a",
    ]
    # a job without GPUs needs Volcano, not HAMi's device plugin
    names = {"namespace/project-team-a", "customresourcedefinition.apiextensions.k8s.io/queues.scheduling.volcano.sh",
             "queue.scheduling.volcano.sh/team-a"}  # fmt: skip
    assert kube.stack_missing_of("open", ["team-a"], names, gpus=False) == []
    assert kube.stack_missing_of("open", ["team-a"], names) == ["hami-device-plugin"]


def test_kubectl_commands_as_the_master_runs_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call is one kubectl argv; `apply` hands the manifest to kubectl's standard input, never
    to a shell's text (tests/unit/test_remote_argv.py shows the argv arriving whole)."""
    import json

    calls: list[tuple[list[str], str | None]] = []

    def kubectl(cfg, args, timeout=60, stdin=None):
        calls.append((args, stdin))
        return '{"items": []}'

    monkeypatch.setattr(kube, "kubectl", kubectl)
    c = kube.KubectlCluster(tr4858_site())
    manifest = job_manifest("runai", "m:5000", "r1", "team-a", Job("team-a", "a-1-g", 1))
    manifest["metadata"]["annotations"] = {"odd": "it's $HOME `x` \\n"}
    c.apply(manifest)
    c.delete_jobs("runai-team-d", ["acceptance-d-1-gggg", "acceptance-d-2-gg"])
    c.pods("r1")
    c.cleanup(["runai-team-a"], "r1")
    assert calls[0][0] == ["apply", "-f", "-"] and json.loads(calls[0][1] or "") == manifest
    assert [a for a, _ in calls[1:]] == [
        ["delete", "jobs", "-n", "runai-team-d", "acceptance-d-1-gggg", "acceptance-d-2-gg", "--ignore-not-found",
         "--wait=false"],
        ["get", "pods", "-A", "-l", "acceptance.appliance/run=r1", "-o", "json"],
        ["delete", "jobs", "-n", "runai-team-a", "-l", "acceptance.appliance/run=r1", "--ignore-not-found",
         "--wait=false"],
    ]  # fmt: skip
    assert all(stdin is None for _, stdin in calls[1:])
