"""scripts/test.sh (`make test`): the unit and integration run beside the lab run, at a lower
priority, its output printed when it ends; when it fails, the lab run is interrupted as Ctrl-C
would (its fixtures torn down) and the whole run fails at once. Probe modules stand in for both."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import termios
import time
from pathlib import Path

import pytest

from tests._support.labsnap import REPO
from tests._support.timings import inner_run_env

SCRIPT = REPO / "scripts" / "test.sh"
# The probes' lab test sleeps an hour: a run that ends within RUN_TIMEOUT_S was stopped. The bound
# is wide because this module runs in the unit lane at nice 10 beside the lab tests, and the probe
# unit run at nice 19 under it: measured 73 s for a two-probe run with two busy cores at nice 0.
LAB_TEST_S = 3600
RUN_TIMEOUT_S = 300


def _probe(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


def _failing_unit_probe(tmp_path: Path, started: Path, wait_s: int) -> Path:
    """A unit run whose one test fails once the lab probe has written STARTED (or WAIT_S passed)."""
    return _probe(
        tmp_path / "test_probe_local.py",
        f"""import pathlib, time
def test_fails_once_the_lab_run_is_under_way():
    end = time.monotonic() + {wait_s}
    while not pathlib.Path({str(started)!r}).exists() and time.monotonic() < end:
        time.sleep(0.1)
    assert False, "a broken unit test"
""",
    )


def _run(
    tmp_path: Path,
    local: Path,
    e2e: Path,
    timeout: float = RUN_TIMEOUT_S,
    pre: Path | None = None,
    path: str = "",
    sigint: signal.Handlers = signal.SIG_DFL,
    tty: int | None = None,
) -> tuple[subprocess.CompletedProcess[str], float]:
    env = inner_run_env()
    env = env | {"PATH": path + env["PATH"]} | {
        "LOCAL_PATHS": str(local), "E2E_PATHS": str(e2e), "LOCAL_ARGS": "-p no:cacheprovider",
        "E2E_ARGS": "-p no:cacheprovider", "PROBE_DIR": str(tmp_path), "LOCAL_LOG": str(tmp_path / "local.log"),
        "LOCAL_PRE": str(pre or ""),
    }  # fmt: skip
    t0 = time.monotonic()
    try:
        r = subprocess.run(
            ["bash", str(SCRIPT)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            preexec_fn=lambda: _inherit(sigint, tty),
            pass_fds=() if tty is None else (tty,),
        )
    except subprocess.TimeoutExpired as e:
        out = "".join(x.decode() if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr))
        pytest.fail(f"scripts/test.sh still ran after {timeout} s: the lab run was not stopped\n{out}")
    return r, time.monotonic() - t0


def _inherit(sigint: signal.Handlers, tty: int | None) -> None:
    """What the script starts with: SIGINT's disposition, and TTY as its controlling terminal."""
    signal.signal(signal.SIGINT, sigint)
    if tty is not None:
        os.setsid()
        fcntl.ioctl(tty, termios.TIOCSCTTY, 0)


NICENESS = """import os, pathlib
def test_niceness():
    pathlib.Path(os.environ["PROBE_DIR"], "{name}.nice").write_text(str(os.nice(0)))
"""


def test_both_runs_pass_and_the_unit_run_is_niced(tmp_path: Path) -> None:
    local = _probe(tmp_path / "test_probe_local.py", NICENESS.format(name="local"))
    e2e = _probe(tmp_path / "test_probe_e2e.py", NICENESS.format(name="e2e"))
    r, _ = _run(tmp_path, local, e2e)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        f"==== unit and integration tests (ran beside the lab tests; {tmp_path / 'local.log'}), rc 0 ===="
        in r.stdout
    )
    assert "make test: pytest (molecule's scenarios included) took " in r.stdout
    assert r.stdout.count("1 passed") == 2, r.stdout  # the local run's, from its log, and the e2e run's
    local_nice, e2e_nice = (int((tmp_path / f"{n}.nice").read_text()) for n in ("local", "e2e"))
    assert local_nice == min(e2e_nice + 10, 19), (local_nice, e2e_nice)


def test_a_failing_unit_run_interrupts_the_lab_run_which_tears_down(tmp_path: Path) -> None:
    started, torn_down = tmp_path / "e2e.started", tmp_path / "e2e.torn-down"
    local = _failing_unit_probe(tmp_path, started, wait_s=60)
    e2e = _probe(
        tmp_path / "test_probe_e2e.py",
        f"""import pathlib, time, pytest
@pytest.fixture(scope="module")
def lab():
    pathlib.Path({str(started)!r}).write_text("")
    yield
    pathlib.Path({str(torn_down)!r}).write_text("")
def test_a_long_lab_test(lab):
    time.sleep({LAB_TEST_S})
""",
    )
    r, _ = _run(tmp_path, local, e2e)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "a broken unit test" in r.stdout  # the unit run's log, printed
    assert "the unit or integration tests failed (rc 1): the lab tests are stopped" in r.stderr
    assert torn_down.exists(), r.stdout + r.stderr  # the lab run's fixtures were torn down


def test_lint_runs_first_in_the_unit_lane_and_its_failure_stops_both_runs(tmp_path: Path) -> None:
    """`make test` gives LOCAL_PRE=scripts/lint.sh: lint runs beside the lab tests, before the unit
    run in its lane; a lint failure fails the run as a unit test failure does, the unit run unstarted."""
    ran = tmp_path / "local.ran"
    local = _probe(
        tmp_path / "test_probe_local.py",
        f"import pathlib\ndef test_ran():\n    pathlib.Path({str(ran)!r}).write_text('')\n",
    )
    e2e = _probe(
        tmp_path / "test_probe_e2e.py",
        f"import time\ndef test_a_long_lab_test():\n    time.sleep({LAB_TEST_S})\n",
    )
    lint = tmp_path / "lint.sh"
    lint.write_text("#!/bin/sh\necho 'ruff: E501 line too long'\nexit 3\n")
    lint.chmod(0o755)
    r, _ = _run(tmp_path, local, e2e, pre=lint)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "ruff: E501 line too long" in r.stdout and not ran.exists()
    assert f"make test: {lint} or the unit or integration tests failed (rc 3)" in r.stderr
    lint.write_text("#!/bin/sh\necho lint passed\n")
    e2e.write_text("def test_quick():\n    pass\n")
    r, _ = _run(tmp_path, local, e2e, pre=lint)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"==== {lint}, unit and integration tests (ran beside" in r.stdout
    assert "lint passed" in r.stdout and ran.exists()


# The lab run's command is `setsid env --default-signal=INT pytest ...`, the unit lane's
# `setsid nice ...`: a wrapper that sleeps 2 s for the lab run only, before the real tool.
SLOW = {
    "setsid": "[[ $1 != env ]] || sleep 2",  # CI stop 51: the INT came before the run's group existed
    "env": "[[ $2 != pytest ]] || sleep 2",  # CI stop 52: the INT came while SIGINT was still ignored
}


@pytest.mark.parametrize("int_on_entry", ["default", "ignored"])
@pytest.mark.parametrize("slow_tool", sorted(SLOW))
def test_a_lint_failure_stops_a_lab_run_that_has_not_started_pytest_yet(
    tmp_path: Path, slow_tool: str, int_on_entry: str
) -> None:
    """Lint fails at once, before the lab run is ready for the INT: its setsid has not run yet (no
    group to signal), or its env has not yet reset SIGINT, which a background job of a script
    starts with ignored. A tool that waits 2 s makes that order certain. "ignored": the script
    itself starts with SIGINT ignored (as under `nohup ... &`)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = subprocess.run(
        ["bash", "-c", f"command -v {slow_tool}"], capture_output=True, text=True, check=True
    )
    slow = bin_dir / slow_tool
    slow.write_text(f'#!/bin/bash\n{SLOW[slow_tool]}\nexec {real.stdout.strip()} "$@"\n')
    slow.chmod(0o755)
    local = _probe(tmp_path / "test_probe_local.py", "def test_x():\n    pass\n")
    e2e = _probe(
        tmp_path / "test_probe_e2e.py",
        f"import time\ndef test_a_long_lab_test():\n    time.sleep({LAB_TEST_S})\n",
    )
    lint = tmp_path / "lint.sh"
    lint.write_text("#!/bin/sh\nexit 3\n")
    lint.chmod(0o755)
    ignore = signal.SIG_IGN if int_on_entry == "ignored" else signal.SIG_DFL
    r, _ = _run(tmp_path, local, e2e, pre=lint, path=f"{bin_dir}:", sigint=ignore)
    assert r.returncode == 3, r.stdout + r.stderr


def test_neither_run_has_a_controlling_terminal(tmp_path: Path) -> None:
    """setsid: run from a terminal, a test that opens /dev/tty (ssh asking about a host key, say)
    fails at once, where in a background group of that terminal it would stop on reading it and
    the suite hang."""
    probe = """import os, pathlib
def test_tty():
    try:
        os.close(os.open("/dev/tty", os.O_RDONLY))
        found = "tty"
    except OSError:
        found = "none"
    pathlib.Path(os.environ["PROBE_DIR"], "{name}.tty").write_text(found)
"""
    local = _probe(tmp_path / "test_probe_local.py", probe.replace("{name}", "local"))
    e2e = _probe(tmp_path / "test_probe_e2e.py", probe.replace("{name}", "e2e"))
    controller, terminal = os.openpty()
    try:
        r, _ = _run(tmp_path, local, e2e, tty=terminal)  # the script has a terminal, as under make
    finally:
        os.close(controller)
        os.close(terminal)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [(tmp_path / f"{n}.tty").read_text() for n in ("local", "e2e")] == ["none", "none"]


def test_an_interrupt_python_dropped_is_sent_again(tmp_path: Path) -> None:
    """Python drops a KeyboardInterrupt raised inside a callback (seen: an import's module-lock
    weakref, at pytest's start). The lab probe here drops the first INT on purpose, once its test
    runs; test.sh sends the INT again, 5 s later, and that one stops it. Like tests/conftest.py, the
    probe ignores any INT after that one: on a loaded machine pytest may take over 5 s to end, and
    test.sh's next beat must not cut its teardown short (CI-check of 731e3ef saw a third INT)."""
    started, seen = tmp_path / "e2e.started", tmp_path / "e2e.ints"
    local = _failing_unit_probe(tmp_path, started, wait_s=120)
    e2e = _probe(
        tmp_path / "test_probe_e2e.py",
        f"""import pathlib, signal, time
def _first_dropped(signum, frame):
    with open({str(seen)!r}, "a") as f:
        f.write("INT\\n")
    if pathlib.Path({str(seen)!r}).read_text().count("INT") > 1:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as tests/conftest.py once an INT is taken
        raise KeyboardInterrupt
def test_a_long_lab_test():
    signal.signal(signal.SIGINT, _first_dropped)
    pathlib.Path({str(started)!r}).write_text("")
    time.sleep({LAB_TEST_S})
""",
    )
    r, seconds = _run(tmp_path, local, e2e)
    assert r.returncode == 1, r.stdout + r.stderr
    assert seen.read_text() == "INT\nINT\n", r.stdout + r.stderr
    assert seconds >= 5, seconds  # the second INT came on test.sh's 5 s beat


def test_an_interrupted_run_ignores_further_interrupts() -> None:
    """tests/conftest.py: once pytest has taken an INT, its labs' teardown is not cut short by another."""
    from tests import conftest

    before = signal.getsignal(signal.SIGINT)
    try:
        conftest.pytest_keyboard_interrupt(excinfo=None)  # type: ignore[arg-type]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
