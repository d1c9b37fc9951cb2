"""The acceptance runner against a fake cluster that answers, for each step, the allocations the
test gives it (it schedules nothing itself): pass and fail paths, waiting for a state to settle,
timeouts, the refusals before anything is submitted, and cleanup whatever happens."""

from __future__ import annotations

import re
from typing import Any

import pytest

from appliance_cli.core.acceptance.compare import JOB_LABEL, PROJECT_LABEL, RUN_LABEL
from appliance_cli.core.acceptance.model import Allocation, Job, Plan
from appliance_cli.core.acceptance.plan import build_plan
from appliance_cli.core.acceptance.runner import NO_GPUS, AcceptanceRun, Outcome, Settings, check_cluster
from appliance_cli.core.acceptance.tr4858 import SCENARIOS
from appliance_cli.errors import ApplianceError, PrerequisiteError, UsageError
from tests._support.acceptance_sites import example, tr4858_site

SMI = "NVIDIA A100-SXM4-80GB, {mib}\n"


def pods_for(alloc: Allocation, run: str) -> list[dict[str, Any]]:
    """Bound pods holding `alloc` (whole GPUs as nvidia.com/gpu, the rest as a Run:ai fraction)."""
    out = []
    for project, gpus in alloc.items():
        whole, frac = int(gpus), round(gpus - int(gpus), 6)
        parts: list[dict[str, Any]] = []
        if whole:
            parts.append({"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": whole}}}]}})
        if frac:
            parts.append(
                {"metadata": {"annotations": {"gpu-fraction": str(frac)}}, "spec": {"containers": [{}]}}
            )
        for i, p in enumerate(parts):
            meta = p.setdefault("metadata", {})
            meta |= {
                "name": f"{project}-{i}",
                "labels": {PROJECT_LABEL: project, RUN_LABEL: run, JOB_LABEL: "x"},
            }
            p["spec"]["nodeName"] = "gpu1"
            p["status"] = {"phase": "Running"}
            out.append(p)
    return out


class FakeCluster:
    def __init__(
        self,
        answers: dict[str, list[Allocation]] | None = None,
        gpus: dict[str, float] | None = None,
        missing: list[str] | None = None,
        foreign: list[dict[str, Any]] | None = None,
        smoke_phase: str = "Succeeded",
        fail_apply: str | None = None,
        fail_cleanup: bool = False,
        cpu_log: str = "cpu smoke: 4 CPUs\n",  # what the CPU-only smoke job's `echo` printed
    ):
        self.cpu_log = cpu_log
        self.answers = answers or {}
        self.gpus = {"gpu1": 8.0, "gpu2": 8.0} if gpus is None else gpus
        self.missing, self.foreign = missing or [], foreign or []
        self.smoke_phase, self.fail_apply, self.fail_cleanup = smoke_phase, fail_apply, fail_cleanup
        self.applied: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, list[str]]] = []
        self.cleaned: list[tuple[list[str], str]] = []
        self.current = ""
        self.polls = 0

    def gpu_allocatable(self) -> dict[str, float]:
        return self.gpus

    def stack_missing(self, stack: str, projects: list[str], gpus: bool = True) -> list[str]:
        return self.missing if gpus else [m for m in self.missing if m != "hami-device-plugin"]

    def apply(self, manifest: dict[str, Any]) -> None:
        job = manifest["metadata"]["labels"][JOB_LABEL]
        if job == self.fail_apply:
            raise ApplianceError(f"kubectl apply {job}: refused")
        self.applied.append(manifest)
        self.current, self.polls = job, 0

    def delete_jobs(self, namespace: str, names: list[str]) -> None:
        self.deleted.append((namespace, names))
        self.current, self.polls = "delete team-d", 0

    def pods(self, run_id: str | None) -> list[dict[str, Any]]:
        if run_id is None:
            return self.foreign
        if self.current.startswith("smoke"):
            return [{"metadata": {"name": self.current, "labels": {JOB_LABEL: self.current}},
                     "spec": {"nodeName": "gpu1"}, "status": {"phase": self.smoke_phase}}]  # fmt: skip
        seq = self.answers[self.current]
        self.polls += 1
        return pods_for(seq[min(self.polls - 1, len(seq) - 1)], run_id)

    def logs(self, namespace: str, job: str) -> str:
        if job.endswith("smoke-cpu"):
            return self.cpu_log
        return SMI.format(mib=40960 if job.endswith("gpu") else 20480)

    def cleanup(self, namespaces: list[str], run_id: str) -> None:
        self.cleaned.append((namespaces, run_id))
        if self.fail_cleanup:
            raise ApplianceError("kubectl delete: the API server went away")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def expected_answers() -> dict[str, list[Allocation]]:
    return {st.name: [st.expected[0]] for sc in SCENARIOS for st in sc.steps}


def run(cluster: FakeCluster, plan: Plan, **settings: Any) -> tuple[Outcome, Clock]:
    clock = Clock()
    s = Settings(stack="runai", registry="master1:5000", run_id="r1", **settings)
    return AcceptanceRun(cluster, s, clock=clock, sleep=clock.sleep).run(plan), clock


def test_everything_as_the_seed_says_passes() -> None:
    cluster = FakeCluster(expected_answers())
    outcome, clock = run(cluster, build_plan(tr4858_site()))
    assert outcome.passed, outcome.failures
    assert [v.passed for v in outcome.smoke] == [True, True]
    assert len(outcome.steps) == 20 and all(r.passed for r in outcome.steps)
    submitted = [m["metadata"]["labels"][JOB_LABEL] for m in cluster.applied]
    assert submitted[:2] == ["smoke-gpu", "smoke-fraction"]
    assert submitted[2:] == [
        st.action.name for sc in SCENARIOS for st in sc.steps if isinstance(st.action, Job)
    ]
    assert cluster.deleted == [
        ("runai-team-d", ["acceptance-d-1-gggg", "acceptance-d-2-gg", "acceptance-d-3-gg"])
    ]
    assert cluster.cleaned == [(["runai-team-a", "runai-team-b", "runai-team-c", "runai-team-d"], "r1")]
    assert clock.t == pytest.approx(20 * 2 * 5)  # three polls a step, two sleeps between them


def test_one_gpu_off_fails_that_step_skips_the_rest_and_still_cleans_up() -> None:
    answers = expected_answers()
    answers["c-4-gg"] = [{"team-a": 4, "team-b": 4, "team-c": 2, "team-d": 0}]  # c-4-gg never scheduled
    cluster = FakeCluster(answers)
    outcome, _ = run(cluster, build_plan(tr4858_site(), "tr4858"), step_timeout_s=60)
    assert not outcome.passed
    assert outcome.failures == [
        "4.8 step c-4-gg (seed lines 469, 501): team-c has 2 GPUs, expected 3 (after 60s)"
    ]
    failed = next(r for r in outcome.steps if not r.passed)
    assert failed.step.name == "c-4-gg" and failed.observed is not None
    after = outcome.steps[outcome.steps.index(failed) + 1 :]
    assert len(after) == 9 and all(r.verdict is None for r in after)
    assert cluster.cleaned and cluster.cleaned[0][1] == "r1"
    assert [m["metadata"]["labels"][JOB_LABEL] for m in cluster.applied][-1] == "c-4-gg"  # nothing after


def test_a_state_reached_late_passes_once_it_holds() -> None:
    answers = expected_answers()
    before = {"team-a": 4, "team-b": 4, "team-c": 4, "team-d": 4}
    # preemption takes a while, and flaps once before it settles
    answers["d-2-gg"] = (
        [before] * 5
        + [{"team-a": 4, "team-b": 2, "team-c": 4, "team-d": 6}, before]
        + [{"team-a": 4, "team-b": 4, "team-c": 2, "team-d": 6}]
    )
    outcome, _ = run(FakeCluster(answers), build_plan(tr4858_site(), "4.9"))
    assert outcome.passed, outcome.failures
    r = next(r for r in outcome.steps if r.step.name == "d-2-gg")
    assert r.observed is not None and r.observed.allocated["team-c"] == 2
    assert r.seconds == pytest.approx((7 + 2) * 5)


def test_a_state_that_does_not_hold_fails_at_the_timeout() -> None:
    answers = expected_answers()
    good, bad = answers["a-1-g"][0], {"team-a": 1, "team-b": 0, "team-c": 0, "team-d": 0}
    answers["a-1-g"] = [good, bad] * 100
    outcome, _ = run(FakeCluster(answers), build_plan(tr4858_site(), "4.8"), step_timeout_s=30)
    assert outcome.failures == [
        "4.8 step a-1-g (seed lines 460, 487): team-a has 1 GPUs, expected 2 (after 30s)"
    ]


def test_an_error_half_way_still_deletes_what_was_submitted() -> None:
    cluster = FakeCluster(expected_answers(), fail_apply="b-3-g")
    with pytest.raises(ApplianceError, match="b-3-g: refused"):
        run(cluster, build_plan(tr4858_site(), "4.8"))
    assert cluster.cleaned == [(["runai-team-a", "runai-team-b"], "r1")]


def test_a_failed_cleanup_fails_the_run() -> None:
    outcome, _ = run(FakeCluster(expected_answers(), fail_cleanup=True), build_plan(tr4858_site(), "smoke"))
    assert [v.passed for v in outcome.smoke] == [True, True]
    assert not outcome.passed and "went away" in outcome.cleanup_error


def test_smoke_job_that_never_runs_times_out() -> None:
    cluster = FakeCluster(smoke_phase="Pending")
    outcome, _ = run(cluster, build_plan(example(), "smoke"), smoke_timeout_s=20)
    assert [v.passed for v in outcome.smoke] == [False, False]
    assert "the pod ended Pending after 20s (timed out)" in outcome.smoke[0].message
    assert cluster.cleaned == [(["runai-team-a"], "r1")]


# ---- before anything is submitted ----
def test_no_gpus_is_refused_in_one_line() -> None:
    with pytest.raises(PrerequisiteError) as exc:
        check_cluster(FakeCluster(gpus={}), tr4858_site(), build_plan(tr4858_site()))
    assert exc.value.message == NO_GPUS and exc.value.hint is None and "`--dry-run` shows the plan" in NO_GPUS
    assert "\n" not in exc.value.message
    with pytest.raises(PrerequisiteError):
        check_cluster(FakeCluster(gpus={"gpu1": 0}), tr4858_site(), build_plan(tr4858_site()))


def test_a_stack_not_installed_is_refused() -> None:
    cluster = FakeCluster(missing=["projects.run.ai", "namespace runai-team-a (project team-a)"])
    with pytest.raises(
        PrerequisiteError, match=re.escape("the runai scheduler stack is not installed: projects.run.ai; ")
    ):
        check_cluster(cluster, tr4858_site(), build_plan(tr4858_site()))
    cfg = example(stack="none", projects=[])
    with pytest.raises(UsageError, match=re.escape("scheduler.stack is 'none'")):
        check_cluster(FakeCluster(), cfg, build_plan(cfg))


def test_the_cluster_decides_whether_tr4858_runs() -> None:
    cfg = tr4858_site()
    plan = check_cluster(FakeCluster(), cfg, build_plan(cfg))
    assert plan.refused == {}
    plan = check_cluster(FakeCluster(gpus={"gpu1": 8, "gpu2": 4}), cfg, build_plan(cfg))
    assert plan.refused == {"tr4858": "the cluster reports 12 GPUs (TR-4858: 16)"} and plan.smoke
    busy = pods_for({"ml": 1}, "other")
    busy[0]["metadata"]["labels"] = {}
    busy[0]["metadata"]["namespace"] = "research"
    plan = check_cluster(FakeCluster(foreign=busy), cfg, build_plan(cfg))
    assert plan.refused == {"tr4858": "GPUs already held by research/ml-0 (1)"}
    with pytest.raises(PrerequisiteError, match="nothing to run on this cluster: tr4858: GPUs already held"):
        check_cluster(FakeCluster(foreign=busy), cfg, build_plan(cfg, "4.8"))


def test_a_refused_part_is_not_run() -> None:
    cluster = FakeCluster(expected_answers())
    outcome, _ = run(cluster, build_plan(example()))  # 12 GPUs: smoke only
    assert outcome.passed and len(outcome.smoke) == 2 and outcome.steps == []
    assert "12 GPUs" in outcome.skipped["tr4858"]


def test_the_gpu_worker_label_is_the_one_node_roles_writes():
    """acceptance finds the GPU nodes by the label node_roles puts on them (K1: runai-gpu-worker)."""
    from pathlib import Path

    import yaml

    from appliance_cli.core.acceptance.kube import GPU_WORKER_LABEL

    defaults = Path(__file__).resolve().parents[2] / "roles" / "node_roles" / "defaults" / "main.yml"
    assert yaml.safe_load(defaults.read_text())["node_roles_role_labels"]["gpu-worker"] == GPU_WORKER_LABEL
