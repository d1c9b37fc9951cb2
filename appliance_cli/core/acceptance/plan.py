"""Which acceptance parts run on a site, and why not.

TR-4858's tables hold only for TR-4858's cluster: 16 GPUs, all of them given out as quotas
team-a 4, team-b 2, team-c 2, team-d 8, every project allowed over its quota. They are not
scaled to another site: the scheduler preempts whole jobs (1, 2 or 4 GPUs, or fractions of one),
so on 12 GPUs or with other quotas other jobs are preempted and no table of the seed says which.
A site that differs runs the smoke jobs only, and the plan names each difference. The cluster
must also report exactly 16 allocatable GPUs at run time (runner.py): with more, nothing would be
preempted; with fewer, more would."""

from __future__ import annotations

from appliance_cli.core.acceptance.compare import fmt
from appliance_cli.core.acceptance.model import Plan, Scenario
from appliance_cli.core.acceptance.smoke import CPU_SMOKE_JOB, SMOKE_JOBS
from appliance_cli.core.acceptance.tr4858 import SCENARIOS, SITE_GPUS, SITE_QUOTAS
from appliance_cli.core.siteconfig import SiteConfig, site_gpus
from appliance_cli.errors import UsageError

TR4858 = "tr4858"
SMOKE = "smoke"
CPU_SMOKE = "cpu-smoke"  # the CPU-only smoke job alone: needs no GPU
STACK = "stack"  # a refusal of everything: the site has no scheduler stack acceptance can use
STACKS = ("runai", "open")
CHOICES = (SMOKE, CPU_SMOKE, *(s.name for s in SCENARIOS), TR4858)


def tr4858_differences(cfg: SiteConfig, cluster_gpus: float | None = None) -> list[str]:
    """What keeps TR-4858's scenarios from applying to this site (empty: they apply)."""
    why: list[str] = []
    gpus = site_gpus(cfg) if cluster_gpus is None else cluster_gpus
    source = "the site has" if cluster_gpus is None else "the cluster reports"
    if gpus != SITE_GPUS:
        why.append(f"{source} {fmt(gpus)} GPUs (TR-4858: {SITE_GPUS})")
    projects = {p.name: p for p in cfg.scheduler.projects}
    for name, quota in SITE_QUOTAS.items():
        p = projects.get(name)
        if p is None:
            why.append(f"no project {name} (TR-4858: quota {fmt(quota)})")
        elif abs(p.gpus - quota) > 1e-9:
            why.append(f"{name} has a quota of {fmt(p.gpus)} (TR-4858: {fmt(quota)})")
        elif not p.over_quota:
            why.append(f"{name} may not go over its quota (TR-4858's projects do)")
    others = sorted(n for n, p in projects.items() if n not in SITE_QUOTAS and p.gpus > 0)
    if others:
        why.append(f"other projects hold quota: {', '.join(others)} (TR-4858: team-a..team-d only)")
    return why


def _chain(name: str) -> list[Scenario]:
    """The scenario and those it starts from (4.10 starts where 4.9 ends, 4.9 where 4.8 ends)."""
    by_name = {s.name: s for s in SCENARIOS}
    chain: list[Scenario] = []
    current: str | None = name
    while current is not None:
        chain.insert(0, by_name[current])
        current = by_name[current].after
    return chain


def build_plan(cfg: SiteConfig, scenario: str | None = None) -> Plan:
    """`scenario`: None for everything, or one of CHOICES."""
    if scenario is not None and scenario not in CHOICES:
        raise UsageError(f"unknown scenario '{scenario}' (known: {', '.join(CHOICES)})")
    want_smoke = scenario in (None, SMOKE, CPU_SMOKE)
    if scenario in (None, TR4858):
        scenarios = list(SCENARIOS)
    elif scenario in (SMOKE, CPU_SMOKE):
        scenarios = []
    else:
        scenarios = _chain(scenario)
    refused: dict[str, str] = {}
    if cfg.scheduler.stack not in STACKS:
        refused[STACK] = (
            f"scheduler.stack is '{cfg.scheduler.stack}': acceptance submits through runai or open"
        )
    smoke_project = cfg.scheduler.projects[0].name if cfg.scheduler.projects else None
    if want_smoke and smoke_project is None:
        refused[SMOKE] = "the site has no scheduler.projects: the smoke jobs run in a project"
    if scenarios and (why := tr4858_differences(cfg)):
        refused[TR4858] = "; ".join(why)
    return Plan(
        smoke_project=smoke_project,
        smoke=((CPU_SMOKE_JOB,) if scenario == CPU_SMOKE else SMOKE_JOBS) if want_smoke else (),
        scenarios=tuple(scenarios),
        refused=refused,
    )
