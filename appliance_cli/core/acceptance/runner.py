"""Run an acceptance plan against a cluster: check it can run, submit, wait, observe, compare,
and always delete what it submitted. The cluster is a port (Cluster): kube.py talks to the real
one through kubectl on the master; the unit tests give a fake one their observations."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from appliance_cli.core.acceptance.compare import (
    JOB_LABEL,
    Observed,
    Verdict,
    compare,
    fmt,
    observe,
    pod_state,
)
from appliance_cli.core.acceptance.manifests import job_manifest, object_name, project_namespace
from appliance_cli.core.acceptance.model import Delete, Job, Plan, Scenario, SmokeJob, Step
from appliance_cli.core.acceptance.plan import STACK, TR4858, tr4858_differences
from appliance_cli.core.acceptance.smoke import SmokeOutcome, SmokeVerdict, check_smoke
from appliance_cli.core.siteconfig import SiteConfig
from appliance_cli.errors import ApplianceError, PrerequisiteError, UsageError

NO_GPUS = (
    "the cluster reports no allocatable nvidia.com/gpu on its gpu-worker nodes (a lab, or a site "
    "without the GPU Operator ready): acceptance needs real GPUs; `--scenario cpu-smoke` checks the "
    "scheduler stack with a CPU-only job, `--dry-run` shows the plan"
)


class Cluster(Protocol):
    def gpu_allocatable(self) -> dict[str, float]:
        """gpu-worker node -> allocatable nvidia.com/gpu."""
        ...

    def stack_missing(self, stack: str, projects: list[str], gpus: bool = True) -> list[str]:
        """What of the scheduler stack (and the projects' namespaces/queues) is not installed; with
        GPUS false, what a job without GPUs needs of it."""
        ...

    def apply(self, manifest: dict[str, Any]) -> None: ...

    def delete_jobs(self, namespace: str, names: list[str]) -> None: ...

    def pods(self, run_id: str | None) -> list[dict[str, Any]]:
        """The run's pods (every pod of the cluster with None), as `kubectl get pods -o json` items."""
        ...

    def logs(self, namespace: str, job: str) -> str: ...

    def cleanup(self, namespaces: list[str], run_id: str) -> None:
        """Delete every object of the run in these namespaces."""
        ...


@dataclass(frozen=True)
class Settings:
    stack: str
    registry: str
    run_id: str
    step_timeout_s: float = 300.0  # how long a step may take to reach its expected state
    smoke_timeout_s: float = 300.0  # image pull + nvidia-smi
    poll_s: float = 5.0
    settle_polls: int = 3  # the expected state must hold this many polls in a row


@dataclass(frozen=True)
class StepResult:
    scenario: str
    step: Step
    verdict: Verdict | None  # None: not run (an earlier step failed)
    observed: Observed | None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.verdict is not None and self.verdict.passed


@dataclass
class Outcome:
    smoke: list[SmokeVerdict] = field(default_factory=list)
    steps: list[StepResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # part -> why it did not run
    cleanup_error: str = ""
    seconds: float = 0.0

    @property
    def failures(self) -> list[str]:
        out = [v.message for v in self.smoke if not v.passed]
        out += [r.verdict.message for r in self.steps if r.verdict is not None and not r.verdict.passed]
        return out

    @property
    def passed(self) -> bool:
        return not self.failures and not self.cleanup_error


def check_cluster(cluster: Cluster, cfg: SiteConfig, plan: Plan) -> Plan:
    """Refuse (PrerequisiteError) a cluster that cannot run acceptance jobs; return the plan with
    the TR-4858 part refused when the cluster's GPUs or its other workloads differ from TR-4858's."""
    stack = cfg.scheduler.stack
    needs_gpus = bool(plan.scenarios) or any(j.gpus > 0 for j in plan.smoke)
    total = sum(cluster.gpu_allocatable().values()) if needs_gpus else 0.0
    if needs_gpus and total <= 0:
        raise PrerequisiteError(NO_GPUS)  # one line: the way out is in it
    if stack not in ("runai", "open"):
        raise UsageError(
            f"scheduler.stack is '{stack}': acceptance runs its jobs through runai or open",
            hint="set scheduler.stack and run `appliance install`",
        )
    projects = [p.name for p in cfg.scheduler.projects]
    missing = cluster.stack_missing(stack, projects, needs_gpus)
    if missing:
        raise PrerequisiteError(
            f"the {stack} scheduler stack is not installed: {'; '.join(missing)}",
            hint="run `appliance install` (it installs scheduler.stack and its projects)",
        )
    refused = dict(plan.refused)
    if plan.scenarios and TR4858 not in refused:
        why = tr4858_differences(cfg, cluster_gpus=total)
        held = foreign_gpu_holders(cluster.pods(None))
        if held:
            why.append(f"GPUs already held by {', '.join(held[:3])}{' …' if len(held) > 3 else ''}")
        if why:
            refused[TR4858] = "; ".join(why)
    runnable = bool(plan.smoke and "smoke" not in refused) or bool(plan.scenarios and TR4858 not in refused)
    if not runnable:
        raise PrerequisiteError(
            "nothing to run on this cluster: " + "; ".join(f"{k}: {v}" for k, v in refused.items()),
            hint="`appliance acceptance --dry-run` shows the plan and the tables",
        )
    return Plan(plan.smoke_project, plan.smoke, plan.scenarios, refused)


def foreign_gpu_holders(pods: list[dict[str, Any]]) -> list[str]:
    """namespace/name (GPUs) of every bound pod holding GPUs that acceptance did not start."""
    out = []
    for pod in pods:
        s = pod_state(pod)
        if s is not None and s.bound and s.gpus > 0 and s.project == "?":
            out.append(f"{pod.get('metadata', {}).get('namespace', '?')}/{s.name} ({fmt(s.gpus)})")
    return out


class AcceptanceRun:
    def __init__(
        self,
        cluster: Cluster,
        settings: Settings,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
        on_progress: Callable[[str], None] = lambda _msg: None,
        on_step: Callable[[StepResult], None] = lambda _r: None,
        on_smoke: Callable[[SmokeVerdict], None] = lambda _v: None,
    ):
        self.cluster, self.settings = cluster, settings
        self.clock = clock or time.monotonic
        self.sleep = sleep or time.sleep
        self.on_progress, self.on_step, self.on_smoke = on_progress, on_step, on_smoke
        self.namespaces: set[str] = set()

    def run(self, plan: Plan) -> Outcome:
        outcome, start = Outcome(skipped=dict(plan.refused)), self.clock()
        try:
            if STACK in plan.refused:
                return outcome
            if plan.smoke and plan.smoke_project and "smoke" not in plan.refused:
                outcome.smoke = self._smoke(plan.smoke_project, list(plan.smoke))
                for v in outcome.smoke:
                    self.on_smoke(v)
            if plan.scenarios and TR4858 not in plan.refused:
                self._scenarios(list(plan.scenarios), outcome)
        finally:
            try:
                self.on_progress(f"deleting the run's jobs ({', '.join(sorted(self.namespaces)) or 'none'})")
                self.cluster.cleanup(sorted(self.namespaces), self.settings.run_id)
            except ApplianceError as exc:
                outcome.cleanup_error = exc.message
            outcome.seconds = self.clock() - start
        return outcome

    def _submit(self, project: str, job: Job | SmokeJob) -> None:
        s = self.settings
        manifest = job_manifest(s.stack, s.registry, s.run_id, project, job)
        self.namespaces.add(manifest["metadata"]["namespace"])
        self.cluster.apply(manifest)

    def _smoke(self, project: str, jobs: list[SmokeJob]) -> list[SmokeVerdict]:
        outcomes = []
        ns = project_namespace(self.settings.stack, project)
        for job in jobs:
            self.on_progress(
                f"smoke: {job.name} ({fmt(job.gpus) + ' GPU' if job.gpus else 'CPU only'}) in {ns}"
            )
            self._submit(project, job)
            phase, node, deadline = "Pending", "", self.clock() + self.settings.smoke_timeout_s
            while True:
                pods = [p for p in self.cluster.pods(self.settings.run_id) if _job_of(p) == job.name]
                phases = [p.get("status", {}).get("phase", "Unknown") for p in pods]
                phase = next(
                    (ph for ph in phases if ph in ("Succeeded", "Failed")),
                    phases[-1] if phases else "Pending",
                )
                node = next((p.get("spec", {}).get("nodeName", "") for p in pods), "")
                if phase in ("Succeeded", "Failed") or self.clock() >= deadline:
                    break
                self.sleep(self.settings.poll_s)
            log = self.cluster.logs(ns, object_name(job.name)) if phase in ("Succeeded", "Failed") else ""
            if phase not in ("Succeeded", "Failed"):
                phase = f"{phase} after {self.settings.smoke_timeout_s:g}s (timed out)"
            outcomes.append(SmokeOutcome(job, phase, log, node))
        return check_smoke(outcomes)

    def _scenarios(self, scenarios: list[Scenario], outcome: Outcome) -> None:
        projects = sorted({p for sc in scenarios for st in sc.steps for p in st.projects})
        failed = False
        for sc in scenarios:
            for step in sc.steps:
                if failed:  # every later table starts from the state the failed step missed
                    result = StepResult(sc.name, step, None, None)
                else:
                    result = self._step(sc, step, projects)
                    failed = not result.passed
                outcome.steps.append(result)
                self.on_step(result)

    def _step(self, sc: Scenario, step: Step, projects: list[str]) -> StepResult:
        s, start = self.settings, self.clock()
        action = step.action
        self.on_progress(f"{sc.name} {step.name}: waiting up to {s.step_timeout_s:g}s for the expected state")
        if isinstance(action, Delete):
            ns = project_namespace(s.stack, action.project)
            self.cluster.delete_jobs(ns, [object_name(n) for n in action.names])
        else:
            self._submit(action.project, action)
        in_a_row, verdict, observed = 0, None, None
        deadline = start + s.step_timeout_s
        while True:
            observed = observe(self.cluster.pods(s.run_id), projects)
            verdict = compare(sc.name, step, observed.allocated)
            in_a_row = in_a_row + 1 if verdict.passed else 0
            if in_a_row >= s.settle_polls:
                break
            # past the deadline a matching state may still settle; anything else has failed
            if self.clock() >= deadline and not verdict.passed:
                verdict = Verdict(False, verdict.expected, verdict.mismatches,
                                  f"{verdict.message} (after {s.step_timeout_s:g}s)")  # fmt: skip
                break
            self.sleep(s.poll_s)
        return StepResult(sc.name, step, verdict, observed, self.clock() - start)


def _job_of(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata", {}).get("labels") or {}).get(JOB_LABEL, ""))
