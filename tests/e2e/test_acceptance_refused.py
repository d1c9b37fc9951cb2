"""`appliance acceptance` against the installed lab: its nodes have no GPUs, so the command
refuses in one line (exit 3) before submitting anything, and --dry-run still shows the plan. A
real site given by APPLIANCE_E2E_SITE whose cluster reports GPUs is skipped: this test never
submits acceptance jobs. Quick: two kubectl reads on the master."""

from __future__ import annotations

import pytest

from appliance_cli.core.acceptance.kube import KubectlCluster
from appliance_cli.core.acceptance.runner import NO_GPUS

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
