"""`appliance acceptance`: the smoke jobs and TR-4858's scheduling scenarios on a real cluster,
or (--dry-run) the plan: every job in order and the GPUs per project expected after it."""

from __future__ import annotations

import argparse
import secrets
import time
from pathlib import Path

from rich.markup import escape

from appliance_cli.cli import ui
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import knownhosts, sitelock
from appliance_cli.core.acceptance.compare import RUN_LABEL, fmt
from appliance_cli.core.acceptance.junit import write_junit
from appliance_cli.core.acceptance.kube import KubectlCluster
from appliance_cli.core.acceptance.manifests import CUDA_IMAGE, private_image, project_namespace
from appliance_cli.core.acceptance.model import Allocation, Delete, Plan, Scenario, Step
from appliance_cli.core.acceptance.plan import CHOICES, SMOKE, STACK, TR4858, build_plan
from appliance_cli.core.acceptance.runner import AcceptanceRun, Outcome, Settings, StepResult, check_cluster
from appliance_cli.core.acceptance.smoke import SmokeVerdict
from appliance_cli.core.acceptance.tr4858 import SITE_GPUS, SITE_QUOTAS
from appliance_cli.core.siteconfig import SiteConfig, load_site, site_gpus
from appliance_cli.errors import ApplianceError, Degraded

PROJECTS = list(SITE_QUOTAS)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "acceptance",
        help="submit a smoke job and TR-4858's quota/fairness scenarios; compare the GPUs per project",
    )
    add_site_arg(p)
    p.add_argument(
        "--dry-run", action="store_true", help="print the jobs and the expected tables; contacts no cluster"
    )
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report (a testcase per job or step)")
    p.add_argument(
        "--scenario",
        choices=CHOICES,
        help="smoke, cpu-smoke (one CPU-only job: the scheduler stack without GPUs), one TR-4858 "
        "section (with those it starts from: 4.10 runs 4.8 and 4.9 first) or tr4858 (all three); "
        "default: everything",
    )
    p.add_argument(
        "--timeout", type=float, default=300.0, metavar="S", help="seconds a step may take to settle (300)"
    )
    p.set_defaults(handler=cmd_acceptance)


def _cells(alloc: Allocation) -> str:
    return "".join(f"{fmt(alloc.get(p, 0)) + '/' + fmt(q):>8}" for p, q in SITE_QUOTAS.items())


def _action(step: Step) -> str:
    a = step.action
    if isinstance(a, Delete):
        return f"delete {a.project} {' '.join(a.names)}"
    kind = "interactive" if a.interactive else "train"
    return f"{a.project} {a.name} {fmt(a.gpus)} GPU {kind}"


def show_scenario(sc: Scenario) -> None:
    ui.info(f"{sc.name}  {sc.title}" + (f" (starts where {sc.after} ends)" if sc.after else ""))
    ui.info(f"     {sc.description}")
    ui.info(f"  {'#':>2}  {'submit / delete':<38}{''.join(f'{p:>8}' for p in PROJECTS)}  seed lines")
    for i, st in enumerate(sc.steps, 1):
        ui.info(f"  {i:>2}  {_action(st):<38}{_cells(st.expected[0])}  {st.seed_lines}")
        for alt in st.expected[1:]:
            ui.info(f"  {'':>2}  {'  or':<38}{_cells(alt)}")
        if st.note:
            ui.info(f"  {'':>2}    ({st.note})")


def show_plan(cfg: SiteConfig, plan: Plan) -> None:
    stack = cfg.scheduler.stack
    ui.info(
        f"acceptance plan for site {cfg.site.name}: scheduler.stack {stack}, "
        f"{site_gpus(cfg)} GPUs on the gpu-worker nodes (dry run: nothing is submitted)"
    )
    ui.info(
        f"image: {private_image(CUDA_IMAGE, cfg.registry.address)} (the bundle's CUDA base image; "
        "TR-4858 ran Jupyter, Run:ai quickstart and NetApp images)"
    )
    if STACK in plan.refused:
        ui.info(f"NOT RUNNABLE on this site: {plan.refused[STACK]}")
    if plan.smoke:
        ui.info("")
        if SMOKE in plan.refused:
            ui.info(f"smoke: NOT RUN on this site: {plan.refused[SMOKE]}")
        else:
            ns = project_namespace(stack, plan.smoke_project or "") if STACK not in plan.refused else "-"
            ui.info(f"smoke, in project {plan.smoke_project} (namespace {ns}): each job must complete")
            for job in plan.smoke:
                if job.gpus == 0:
                    ui.info(f"  {job.name:<16} CPU only  completes on a node the {stack} scheduler picks")
                    continue
                what = "nvidia-smi sees one GPU"
                if job.gpus < 1:
                    what += f" and {job.gpus:.0%} of its memory (TR-4858 line 308)"
                ui.info(f"  {job.name:<16}{fmt(job.gpus):>4} GPU  {what}")
    if plan.scenarios:
        ui.info("")
        quotas = ", ".join(f"{p} {fmt(q)}" for p, q in SITE_QUOTAS.items())
        head = f"TR-4858 (16 GPUs; quotas {quotas}; cells: GPUs allocated/quota after the step)"
        if TR4858 in plan.refused:
            ui.info(f"{head}: NOT RUN on this site: {plan.refused[TR4858]}")
            ui.info(
                f"  (TR-4858's tables hold on {SITE_GPUS} GPUs with those quotas only: they are shown, not scaled)"
            )
        else:
            ui.info(head)
        for sc in plan.scenarios:
            ui.info("")
            show_scenario(sc)


def show_step(r: StepResult) -> None:
    if r.verdict is None:
        ui.info(f"SKIP  {r.scenario} {r.step.name}: not run (an earlier step failed)")
        return
    observed = r.observed.allocated if r.observed else {}
    queued = sum(r.observed.queued.values()) if r.observed else 0
    status = "PASS" if r.verdict.passed else "FAIL"
    ui.info(
        f"{status}  {r.scenario:<5}{r.step.name:<15}{_cells(observed)}   queued {queued}  "
        f"({r.seconds:.0f}s; seed lines {r.step.seed_lines})"
    )
    if not r.verdict.passed:
        ui.error(r.verdict.message)


def progress(message: str) -> None:
    """What the run is doing, on stderr: stdout keeps the results."""
    ui.err.print(f"[dim]… {escape(ui.visible(message))}[/]", markup=True, highlight=False)


def show_smoke(v: SmokeVerdict) -> None:
    ui.info(f"{'PASS' if v.passed else 'FAIL'}  {v.message}")


def summary(plan: Plan, outcome: Outcome) -> str:
    smoke_ok = sum(v.passed for v in outcome.smoke)
    steps = [r for r in outcome.steps if r.verdict is not None]
    parts = [f"smoke {smoke_ok}/{len(outcome.smoke)} passed"] if outcome.smoke else []
    if outcome.steps:
        parts.append(f"TR-4858 {sum(r.passed for r in steps)}/{len(outcome.steps)} steps passed")
    parts += [f"{k}: not run ({v})" for k, v in outcome.skipped.items()]
    return f"acceptance: {'; '.join(parts)} in {outcome.seconds:.0f}s"


def cmd_acceptance(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    plan = build_plan(cfg, args.scenario)
    if args.dry_run:
        show_plan(cfg, plan)
        return 0
    knownhosts.require_host_keys(cfg)
    with sitelock.site_lock(cfg, "acceptance"):  # its jobs take every GPU of the site
        cluster = KubectlCluster(cfg)
        plan = check_cluster(cluster, cfg, plan)
        for part, why in plan.refused.items():
            ui.warn(f"{part}: not run on this site: {why}")
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        settings = Settings(
            stack=cfg.scheduler.stack,
            registry=cfg.registry.address,
            run_id=run_id,
            step_timeout_s=args.timeout,
        )
        ui.info(f"acceptance run {run_id} on site {cfg.site.name} ({cfg.scheduler.stack})")
        ui.info(f"{'':6}{'':5}{'step':<15}{''.join(f'{p:>8}' for p in PROJECTS)}   (GPUs allocated/quota)")
        try:
            outcome = AcceptanceRun(
                cluster, settings, on_progress=progress, on_step=show_step, on_smoke=show_smoke
            ).run(plan)
        except (
            ApplianceError
        ) as exc:  # the runner tried to delete its jobs; say how to, should it have failed
            leftover = f"`kubectl delete jobs -A -l {RUN_LABEL}={run_id}` removes what the run left"
            exc.hint = f"{exc.hint}; {leftover}" if exc.hint else leftover
            raise
        if outcome.cleanup_error:
            ui.error(f"the run's jobs (label {RUN_LABEL}={run_id}) were not all deleted: "
                     f"{outcome.cleanup_error}")  # fmt: skip
        if args.junit:
            write_junit(plan, outcome, Path(args.junit))
            ui.info(f"wrote {args.junit}")
        ui.info(summary(plan, outcome))
        if not outcome.passed:
            first = outcome.failures[0] if outcome.failures else outcome.cleanup_error
            more = f" (+{len(outcome.failures) - 1} more)" if len(outcome.failures) > 1 else ""
            raise Degraded(
                f"acceptance failed: {first}{more}", hint="the steps above show what each project got"
            )
    return 0
