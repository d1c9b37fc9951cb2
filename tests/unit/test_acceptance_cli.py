"""`appliance acceptance` as a user runs it: --dry-run without any cluster, the one-line refusal
of a cluster without GPUs (exit 3), a passing and a failing run with their JUnit reports (exit 8
on a failure), all against the fake cluster of test_acceptance_runner (no SSH, no sleeping)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.cli import acceptance_cmd
from appliance_cli.cli.main import main
from appliance_cli.core import knownhosts, sitelock
from appliance_cli.core.acceptance import runner
from tests._support.paths import EXAMPLE
from tests.unit.test_acceptance_runner import Clock, FakeCluster, expected_answers


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a: Any, **k: Any) -> None:
        raise AssertionError(f"no process may run: {a}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


def test_dry_run_prints_the_plan_and_touches_nothing(
    no_network: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["acceptance", "--dry-run", "--site", str(EXAMPLE.parent)]) == 0
    out = capsys.readouterr().out
    assert "image: master1:5000/nvidia/cuda:12.6.1-base-ubi8" in out
    assert "smoke, in project team-a (namespace runai-team-a)" in out
    assert (
        "NOT RUN on this site: the site has 12 GPUs (TR-4858: 16); team-d has a quota of 4 (TR-4858: 8)"
        in out
    )
    # the final table of 4.10 (lines 403-406) and 4.9's either-or
    assert "delete team-d d-1-gggg d-2-gg d-3-gg       8/4     4/2     4/2     0/8  582; 403-406" in out
    assert out.count("  or  ") == 1


def test_dry_run_of_one_section_brings_what_it_starts_from(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acceptance", "--dry-run", "--scenario", "4.9", str(EXAMPLE.parent)]) == 0
    out = capsys.readouterr().out
    assert "4.8  TR-4858 4.8" in out and "4.9  TR-4858 4.9" in out and "4.10  " not in out
    assert "smoke" not in out.split("TR-4858 (16 GPUs")[0].split("image:")[1]


def test_dry_run_of_the_cpu_smoke_shows_one_job_and_no_gpu_need(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acceptance", "--dry-run", "--scenario", "cpu-smoke", str(EXAMPLE.parent)]) == 0
    out = capsys.readouterr().out
    assert "  smoke-cpu        CPU only  completes on a node the runai scheduler picks" in out, out
    assert "nvidia-smi" not in out and "TR-4858 (16 GPUs" not in out


@pytest.fixture
def tr_site(tmp_path: Path) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["nodes"].append({"name": "gpu3", "address": "192.168.10.23", "hardware_class": "S5N-3U",
                          "roles": ["gpu-worker"]})  # fmt: skip
    data["scheduler"]["projects"][3]["gpus"] = 8
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    return tmp_path


@contextlib.contextmanager
def _no_master_lock(cfg: Any) -> Iterator[None]:
    yield  # no SSH from unit tests: the master's lock is proven in the lab


def _with(monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster) -> None:
    monkeypatch.setattr(knownhosts, "require_host_keys", lambda cfg: None)
    monkeypatch.setattr(sitelock, "master_lock", _no_master_lock)
    monkeypatch.setattr(acceptance_cmd, "KubectlCluster", lambda cfg: cluster)
    clock = Clock()

    class FakeTime:
        monotonic = staticmethod(clock)
        sleep = staticmethod(clock.sleep)

    monkeypatch.setattr(runner, "time", FakeTime)


def test_a_cluster_without_gpus_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tr_site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = FakeCluster(gpus={"gpu1": 0, "gpu2": 0})
    _with(monkeypatch, cluster)
    assert main(["acceptance", "--site", str(tr_site)]) == 3
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "error: the cluster reports no allocatable nvidia.com/gpu on its gpu-worker nodes (a lab, or a "
        "site without the GPU Operator ready): acceptance needs real GPUs; `--scenario cpu-smoke` checks "
        "the scheduler stack with a CPU-only job, `--dry-run` shows the plan"
    ]
    assert cluster.applied == [] and cluster.cleaned == []


@pytest.mark.parametrize("stack", ["runai", "open"])
def test_the_cpu_smoke_job_needs_no_gpu_and_goes_through_the_stack(
    monkeypatch: pytest.MonkeyPatch, tr_site: Path, capsys: pytest.CaptureFixture[str], stack: str
) -> None:
    data = yaml.safe_load((tr_site / "appliance.yml").read_text())
    data["scheduler"]["stack"] = stack
    if stack == "open":  # HAMi + Volcano's own config
        data["scheduler"].pop("runai", None)
    (tr_site / "appliance.yml").write_text(yaml.safe_dump(data))
    cluster = FakeCluster(gpus={"gpu1": 0, "gpu2": 0})
    _with(monkeypatch, cluster)
    assert main(["acceptance", "--scenario", "cpu-smoke", "--site", str(tr_site)]) == 0, (
        capsys.readouterr().err
    )
    out = capsys.readouterr().out
    assert "PASS  smoke smoke-cpu (CPU only): completed on gpu1, where it saw 4 CPUs" in out, out
    assert "smoke 1/1 passed" in out, out
    [job] = cluster.applied
    spec = job["spec"]["template"]["spec"]
    assert spec["schedulerName"] == {"runai": "runai-scheduler", "open": "volcano"}[stack]
    assert job["metadata"]["namespace"] == {"runai": "runai-team-a", "open": "project-team-a"}[stack]
    [c] = spec["containers"]
    assert c["resources"] == {"requests": {"cpu": "100m", "memory": "64Mi"}}, c  # no GPU asked for
    assert (
        c["command"] == ["sh", "-c", 'echo "cpu smoke: $(nproc) CPUs"'] and job["spec"]["backoffLimit"] == 0
    )
    annotations = job["spec"]["template"]["metadata"].get("annotations", {})
    assert annotations == ({} if stack == "runai" else {"scheduling.volcano.sh/queue-name": "team-a"})
    assert cluster.cleaned and cluster.cleaned[0][1] == job["metadata"]["labels"]["acceptance.appliance/run"]


def test_the_cpu_smoke_job_that_never_runs_fails_naming_its_phase(
    monkeypatch: pytest.MonkeyPatch, tr_site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = FakeCluster(gpus={}, smoke_phase="Pending")
    _with(monkeypatch, cluster)
    assert main(["acceptance", "--scenario", "cpu-smoke", "--timeout", "5", "--site", str(tr_site)]) == 8
    err = capsys.readouterr().err
    assert (
        "acceptance failed: smoke smoke-cpu (CPU only): the pod ended Pending after 300s (timed out)" in err
    ), err


def test_a_cpu_smoke_job_that_succeeded_without_its_line_fails(
    monkeypatch: pytest.MonkeyPatch, tr_site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Succeeded alone is not enough: its log must show the command ran (here, the log API failed)."""
    cluster = FakeCluster(gpus={}, cpu_log="(no log: the server could not find the requested resource)")
    _with(monkeypatch, cluster)
    assert main(["acceptance", "--scenario", "cpu-smoke", "--site", str(tr_site)]) == 8
    err = capsys.readouterr().err
    assert (
        "acceptance failed: smoke smoke-cpu (CPU only): completed on gpu1, but its log lacks its line: "
        "(no log: the server could not find the requested resource)" in err
    ), err


def _suites(path: Path) -> dict[str, dict[str, str]]:
    root = ET.parse(path).getroot()
    return {s.get("name", ""): dict(s.attrib) for s in root.iter("testsuite")}


def test_a_passing_run(monkeypatch: pytest.MonkeyPatch, tr_site: Path, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    cluster = FakeCluster(expected_answers())
    _with(monkeypatch, cluster)
    junit = tmp_path / "acc.xml"
    assert main(["acceptance", "--site", str(tr_site), "--junit", str(junit)]) == 0
    out = capsys.readouterr().out
    assert "PASS  4.10 delete team-d       8/4     4/2     4/2     0/8   queued 0" in out
    assert "PASS  smoke smoke-fraction (0.5 GPU): NVIDIA A100-SXM4-80GB, 20480 of 40960 MiB (50%" in out
    assert "acceptance: smoke 2/2 passed; TR-4858 20/20 steps passed" in out
    suites = _suites(junit)
    assert {k: (v["tests"], v["failures"], v["skipped"]) for k, v in suites.items()} == {
        "smoke": ("2", "0", "0"),
        "TR-4858 4.8": ("13", "0", "0"),
        "TR-4858 4.9": ("2", "0", "0"),
        "TR-4858 4.10": ("5", "0", "0"),
    }
    assert len(cluster.cleaned) == 1


def test_a_failing_run(monkeypatch: pytest.MonkeyPatch, tr_site: Path, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    answers = expected_answers()
    answers["d-3-gg"] = [{"team-a": 4, "team-b": 2, "team-c": 4, "team-d": 6}]  # nothing preempted for d-3-gg
    cluster = FakeCluster(answers)
    _with(monkeypatch, cluster)
    junit = tmp_path / "acc.xml"
    assert main(["acceptance", "--site", str(tr_site), "--scenario", "4.10", "--junit", str(junit)]) == 8
    out, err = capsys.readouterr()
    assert "FAIL  4.9  d-3-gg" in out and "SKIP  4.10 a-3-gg" in out
    assert "error: acceptance failed: 4.9 step d-3-gg (seed lines 529, 535; 541-544): team-c has 4 GPUs, " \
           "expected 2; team-d has 6 GPUs, expected 8 (after 300s)" in err  # fmt: skip
    suites = _suites(junit)
    assert (suites["TR-4858 4.9"]["failures"], suites["TR-4858 4.10"]["skipped"]) == ("1", "5")
    assert "smoke" not in suites
    assert len(cluster.cleaned) == 1


def test_a_site_unlike_tr4858_runs_the_smoke_jobs_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _with(monkeypatch, FakeCluster(gpus={"gpu1": 4, "gpu2": 8}))
    junit = tmp_path / "acc.xml"
    site = tmp_path / "site"  # a copy: the run's lock file is written in the site directory
    site.mkdir()
    shutil.copy(EXAMPLE, site / EXAMPLE.name)
    assert main(["acceptance", "--site", str(site), "--junit", str(junit)]) == 0
    err = capsys.readouterr().err
    assert "warning: tr4858: not run on this site: the site has 12 GPUs (TR-4858: 16)" in err
    suites = _suites(junit)
    assert suites["TR-4858 4.8"]["skipped"] == "1" and suites["smoke"]["failures"] == "0"


def test_an_error_half_way_says_how_to_remove_what_is_left(
    monkeypatch: pytest.MonkeyPatch, tr_site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = FakeCluster(expected_answers(), fail_apply="b-3-g")
    _with(monkeypatch, cluster)
    assert main(["acceptance", "--site", str(tr_site), "--scenario", "4.8"]) == 1
    err = capsys.readouterr().err
    assert "error: kubectl apply b-3-g: refused" in err
    assert "hint: `kubectl delete jobs -A -l acceptance.appliance/run=" in err
    assert len(cluster.cleaned) == 1
