"""`appliance acceptance` against the installed lab: its nodes have no GPUs, so the command
refuses in one line (exit 3) before submitting anything, and --dry-run still shows the plan. A
real site given by APPLIANCE_E2E_SITE whose cluster reports GPUs is skipped there: that test
never submits GPU jobs. `--scenario cpu-smoke` needs no GPU: its Job goes through the site's
scheduler stack (in the lab, the stand-in's Volcano scheduler and Job controller) and its pod runs
in a real container on a worker, as the kubelet's Started event shows; then the run's Job and pod
are gone."""

from __future__ import annotations

import json
import re
import time

import pytest

from appliance_cli.core.acceptance.kube import KubectlCluster
from appliance_cli.core.acceptance.runner import NO_GPUS
from appliance_cli.core.cluster import kubectl
from appliance_cli.core.siteconfig import project_namespace

pytestmark = pytest.mark.usefixtures("installs")


def test_a_cluster_without_gpus_is_refused_in_one_line(site, cli):
    if sum(KubectlCluster(site).gpu_allocatable().values()) > 0:
        pytest.skip("this cluster has GPUs: the refusal is a lab's (run `appliance acceptance` itself)")
    run = cli("acceptance", "--site", str(site.site_dir), timeout=120)
    assert run.rc == 3, run.err
    assert run.err.strip().splitlines() == [f"error: {NO_GPUS}"]


def test_dry_run_needs_no_gpus(site, cli):
    run = cli("acceptance", "--dry-run", "--site", str(site.site_dir), timeout=60)
    assert run.rc == 0, run.err
    assert "acceptance plan for site" in run.out and "4.10" in run.out


def test_the_cpu_smoke_job_runs_through_the_scheduler_stack_in_a_real_container(site, cli):
    run = cli("acceptance", "--scenario", "cpu-smoke", "--site", str(site.site_dir), timeout=600)
    assert run.rc == 0, run.out[-2000:] + run.err[-2000:]
    line = next(x for x in run.out.splitlines() if "smoke-cpu" in x and x.startswith(("PASS", "FAIL")))
    workers = [n.name for n in site.nodes if n.name != site.master.name]
    # its log, read through the API server's pods/log from the worker's kubelet, shows it ran
    m = re.fullmatch(r"PASS  smoke smoke-cpu \(CPU only\): completed on (\S+), where it saw (\d+) CPUs", line)
    assert m and m[1] in workers and int(m[2]) >= 1, line
    assert "smoke 1/1 passed" in run.out, run.out
    ns = project_namespace(site.scheduler.stack, site.scheduler.projects[0].name)
    events = json.loads(kubectl(site, ["get", "events", "-n", ns, "-o", "json"]))["items"]
    started = [e for e in events if e.get("reason") == "Started"
               and e["involvedObject"]["name"].startswith("acceptance-smoke-cpu-")]  # fmt: skip
    assert started and started[-1]["message"] == "Started container cpu", started
    print(line, "|", started[-1]["involvedObject"]["name"], started[-1]["message"])
    deadline = time.monotonic() + 60  # the Job is deleted at the end; its pod goes with it
    while True:
        left = kubectl(site, ["get", "jobs,pods", "-n", ns, "-o", "name"]).split()
        if not [n for n in left if "acceptance-smoke-cpu" in n] or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert not [n for n in left if "acceptance-smoke-cpu" in n], left
