"""`appliance install` ends with a quick diagnose: its summary and bottleneck line after a
successful run; a diagnose that cannot run is a warning and the install still exits 0; --check
runs and --skip-diagnose skip it. The runner is the fake of test_install_service."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from appliance_cli.cli import diagnose_cmd, install_cmd
from appliance_cli.cli.main import main
from appliance_cli.core import converged, sitelock
from appliance_cli.core.checks.model import CheckResult, Report, Status
from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.errors import Unreachable
from tests._support.paths import EXAMPLE
from tests.unit.test_install_service import FakeRunner


@pytest.fixture
def site(tmp_path: Path) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    for i, node in enumerate(data["nodes"]):  # never the example's real addresses
        node["address"] = f"127.0.0.{i + 1}"
    data["network"] = {"node_cidr": "127.0.0.0/8"}
    data["nfs"]["server"] = "127.0.0.9"
    # Run:ai would be refused without its certificate (test_runai_refusals)
    data["scheduler"]["stack"] = "open"
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    cfg = load_site(tmp_path)
    (tmp_path / "known_hosts").write_text(
        "".join(f"{n.name},{n.address} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake\n" for n in cfg.nodes)
    )
    return tmp_path


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, float]]:
    """The runner faked, and the diagnose: a slow disk on gpu1 (what it was asked: mb, seconds)."""
    seen: list[tuple[int, float]] = []

    def fake_diagnose(cfg: SiteConfig, mb: int = 256, seconds: float = 1.0, **_: object) -> Report:
        seen.append((mb, seconds))
        slow = CheckResult("disk_write", "storage", "gpu1", Status.FAIL, "600.0 MB/s", "peers' median 1500.0 MB/s",
                           "0.40x of what it should be: look at this node's storage", 600.0, "MB/s", "higher")  # fmt: skip
        ok = CheckResult(
            "disk_write", "storage", "gpu2", Status.PASS, "1500.0 MB/s", "", "", 1500.0, "MB/s", "higher"
        )
        return Report("diagnose", cfg.site.name, [slow, ok], seconds=3.2, bottleneck=slow)

    monkeypatch.setattr(install_cmd, "make_runner", FakeRunner)
    monkeypatch.setattr(sitelock, "master_lock", _no_master_lock)
    monkeypatch.setattr(converged, "look", lambda cfg: converged.Look({n.name: {} for n in cfg.nodes}, []))
    monkeypatch.setattr(diagnose_cmd, "run_diagnose", fake_diagnose)
    return seen


INSTALL = ("install", "--skip-preflight", "--no-verify-bundle")


@contextlib.contextmanager
def _no_master_lock(cfg: SiteConfig) -> Iterator[None]:
    """No SSH from unit tests: the master's lock is proven in the lab (tests/e2e)."""
    yield


def test_a_second_install_on_the_same_site_is_refused_while_one_runs(site: Path, calls, capsys) -> None:
    with sitelock.controller_lock(site, "install"):
        assert main([*INSTALL, str(site)]) == 9
    err = capsys.readouterr().err
    assert f"{site}: another run holds this site (`appliance install`, pid {os.getpid()}, since" in err
    assert main([*INSTALL, str(site)]) == 0  # released with the run that held it


def test_a_successful_install_ends_with_the_quick_diagnose(site: Path, calls, capsys) -> None:
    assert main([*INSTALL, str(site)]) == 0
    out, err = capsys.readouterr()
    assert calls == [(64, 0.5)]  # the --quick sizes
    assert "diagnose acme-ai-lab: 1 passed, 0 warnings, 1 failed, 0 skipped on 2 nodes in 3.2s" in out
    assert "bottleneck: storage on gpu1: disk_write 600.0 MB/s (expected peers' median 1500.0 MB/s)" in out
    # what is not well is a warning: the install succeeded
    assert "warning: gpu1: storage/disk_write: 600.0 MB/s" in err and "error:" not in err
    assert out.index("install finished") < out.index("bottleneck:")


def test_a_diagnose_that_cannot_run_is_a_warning_and_the_install_exits_0(
    site: Path, calls, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    def unreachable(cfg: SiteConfig, **_: object) -> Report:
        raise Unreachable("master1 (192.168.10.11): SSH cannot connect: Connection refused")

    monkeypatch.setattr(diagnose_cmd, "run_diagnose", unreachable)
    assert main([*INSTALL, str(site)]) == 0
    out, err = capsys.readouterr()
    assert "install finished" in out
    assert "warning: quick diagnose did not run: master1 (192.168.10.11): SSH cannot connect" in err
    assert "the install itself succeeded" in err and "error:" not in err


@pytest.mark.parametrize(
    "flag",
    [["--check"], ["--skip-diagnose"], ["--tags", "gpu_operator"], ["--limit", "gpu1"], ["--skip-tags", "x"]],
)
def test_check_partial_runs_and_skip_diagnose_do_not_diagnose(
    site: Path, calls, flag: list[str], capsys
) -> None:
    assert main([*INSTALL, str(site), *flag]) == 0
    assert calls == [] and "bottleneck" not in capsys.readouterr().out


def test_a_failed_install_does_not_diagnose(site: Path, calls, monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance_cli.runner.events import RunResult

    monkeypatch.setattr(install_cmd, "make_runner", lambda: FakeRunner(RunResult("failed", 2, {}, site)))
    assert main([*INSTALL, str(site)]) == 5
    assert calls == []


def test_a_run_that_lost_a_node_shows_its_recap_and_warnings_then_exits_7(
    site: Path, calls, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The recap (what every node did) and the run's warnings come before the error line, so the
    operator sees the nodes that finished and what the waits left out."""
    from appliance_cli.runner.events import HostResult, HostStats, HostWarning, RunResult

    lost = RunResult(
        "failed", 2, {"master1": HostStats(ok=9), "gpu1": HostStats(ok=3, unreachable=1), "gpu2": HostStats(ok=9)},
        site / "artifacts",
        failures=[HostResult("gpu1", "Apt | Offline repository", "unreachable", "SSH connection lost",
                             address="127.0.0.2")],
        warnings=[HostWarning("master1", "not waited for Ready (no longer in this run): gpu1")],
    )  # fmt: skip
    monkeypatch.setattr(install_cmd, "make_runner", lambda: FakeRunner(lost))
    assert main([*INSTALL, str(site)]) == 7
    out, err = capsys.readouterr()
    assert "RECAP gpu1 ok=3 changed=0 failed=0 unreachable=1 skipped=0" in out
    assert "warning: master1: not waited for Ready (no longer in this run): gpu1" in err
    lines = err.splitlines()
    error = next(i for i, ln in enumerate(lines) if ln.startswith("error: "))
    assert (
        lines[error]
        == "error: gpu1 (127.0.0.2) unreachable: SSH connection lost (task 'Apt | Offline repository')"
    )
    assert lines[error + 1].startswith(
        f"hint: the other nodes finished; once gpu1 answers SSH again, appliance install --site {site} --limit gpu1 "
    )
    assert calls == []  # no quick diagnose after a failed run
