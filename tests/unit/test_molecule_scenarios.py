"""tests/_support/molecule_scenarios.py: every role with tasks has a lab scenario, and the suite's two
lanes run each exactly once, in an order in which each build-lane scenario's start state is saved by
a scenario before it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance_cli.lab.proc import alive
from tests._support import molecule_scenarios
from tests._support.labsnap import REPO


def test_every_role_with_tasks_has_a_lab_scenario_and_both_lanes_run_each_once() -> None:
    with_tasks = sorted(p.parent.parent.name for p in (REPO / "roles").glob("*/tasks/main.yml"))
    build, cluster = molecule_scenarios.lanes()
    assert sorted(build + cluster) == with_tasks
    assert len(build + cluster) == len(set(build + cluster)) == 19


def test_each_build_scenario_starts_from_roles_the_lane_has_run_before_it() -> None:
    build, _ = molecule_scenarios.lanes()
    for i, role in enumerate(build):
        start = [t for t in molecule_scenarios.scenario_env(role)["MOLECULE_LAB_PREPARE"].split(",") if t]
        # every role it starts from ran before it, in the same order: a scenario before it saved
        # this start state, or a run of the same roles it continues from
        assert [r for r in build[:i] if r in start] == start, role


def test_a_scenario_comes_right_after_the_one_whose_end_is_its_start_when_there_is_one() -> None:
    """Depth first: so the one before can hand it the lab up (lab.py save-next) instead of saving
    it for a boot. helm's end is scheduler_stack's start: the two run back to back."""
    build, _ = molecule_scenarios.lanes()
    ends = {
        ",".join(
            [*(t for t in molecule_scenarios.scenario_env(r)["MOLECULE_LAB_PREPARE"].split(",") if t), r]
        ): r
        for r in build
    }
    handed = 0
    for i, role in enumerate(build[1:], 1):
        before = ends.get(molecule_scenarios.scenario_env(role)["MOLECULE_LAB_PREPARE"])
        if before is not None and build[i - 1] != before:
            # a later sibling: the lab it starts from was saved once the first of them came next
            assert build.index(before) < i - 1, role
        handed += build[i - 1] == before
    assert build.index("scheduler_stack") == build.index("helm") + 1
    assert handed >= 9, build  # bundle_repo..cni_flannel's chain, and helm to scheduler_stack


def test_a_scenario_another_starts_from_saves_its_lab_after_verify_and_none_destroys_first() -> None:
    import yaml

    build, cluster = molecule_scenarios.lanes()
    starts = {molecule_scenarios.scenario_env(r)["MOLECULE_LAB_PREPARE"] for r in build}
    savers = 0
    for role in build + cluster:
        data = yaml.safe_load((REPO / "roles" / role / molecule_scenarios.SCENARIO).read_text())
        seq = data["scenario"]["test_sequence"]
        assert seq[0] == "create" and seq[-1] == "destroy" and seq.count("destroy") == 1, role
        env = molecule_scenarios.scenario_env(role)
        end = ",".join([t for t in env.get("MOLECULE_LAB_PREPARE", "").split(",") if t] + [role])
        # an upgrade another starts from (chart_upgrade from kube_upgrade's upgraded nodes)
        upgraded = env.get("MOLECULE_LAB_LEAVES") and any(
            molecule_scenarios.scenario_env(r).get("MOLECULE_UPGRADE_PREPARE") == env["MOLECULE_LAB_LEAVES"]
            and molecule_scenarios.scenario_env(r).get("MOLECULE_LAB_OLD") == env.get("MOLECULE_LAB_OLD")
            for r in cluster[cluster.index(role) + 1 :]
        ) if role in cluster else False  # fmt: skip
        if (role in build and end in starts) or upgraded:
            savers += 1
            # right after verify: molecule runs side_effect only when every step before it passed
            assert seq[seq.index("verify") + 1] == "side_effect", role
            assert data["ansible"]["playbooks"]["side_effect"].endswith("/tests/molecule/save_next.yml")
        else:
            assert "side_effect" not in seq, role
    assert savers == 11


def test_cluster_scenarios_on_the_current_version_come_before_the_upgrades() -> None:
    _, cluster = molecule_scenarios.lanes()
    old = [bool(molecule_scenarios.scenario_env(r).get("MOLECULE_LAB_OLD")) for r in cluster]
    assert old == sorted(old) and any(old) and not all(old)
    assert all(molecule_scenarios.scenario_env(r)["MOLECULE_LAB_INSTALLED"] == "1" for r in cluster)


def test_the_module_prints_what_make_molecule_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tests._support.molecule_scenarios"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()  # fmt: skip
    build, cluster = molecule_scenarios.lanes()
    assert out == build + cluster
    make = (REPO / "Makefile").read_text()  # `make molecule`'s list is that output
    assert "MOLECULE_ROLES ?= $(shell $(VENV)/python -m tests._support.molecule_scenarios)\n" in make


def _fake_molecule(tmp_path: Path, script: str) -> Path:
    """A directory holding an executable `molecule` that runs SCRIPT (for run()'s venv_bin)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "molecule").write_text(script)
    (fake / "molecule").chmod(0o755)
    return fake


def test_a_scenario_runs_molecule_in_the_roles_directory_on_the_named_lab_and_logs_every_line(
    tmp_path: Path,
) -> None:
    """With a `molecule` on PATH that records what it was given, and no outer pytest's settings."""
    fake = _fake_molecule(
        tmp_path,
        '#!/bin/sh\necho "args=$* cwd=$(pwd) lab=$APPLIANCE_LAB_NAME timings=${APPLIANCE_TIMINGS_JSON:-none}'
        ' next=$MOLECULE_LAB_HAND_TO"\n'
        "echo second line\nexit 3\n",
    )
    saved = {k: os.environ.get(k) for k in ("PATH", "APPLIANCE_TIMINGS_JSON")}
    os.environ["PATH"] = f"{fake}{os.pathsep}{os.environ['PATH']}"
    os.environ["APPLIANCE_TIMINGS_JSON"] = str(tmp_path / "outer.json")
    try:
        # the venv's bin goes first on PATH, so give the fake the same place in the search
        run = molecule_scenarios.run("registry", "mol-x", tmp_path / "logs", venv_bin=fake, hand_to="helm")
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert run.rc == 3
    lines = run.log.read_text().splitlines()
    assert len(lines) == 2
    first = lines[0].split(maxsplit=1)
    float(first[0])  # stamped with the seconds since the start
    assert first[1] == f"args=test -s lab cwd={REPO / 'roles/registry'} lab=mol-x timings=none next=helm"
    assert lines[1].endswith(" second line")
    assert run.tail(1).endswith("second line")


def test_a_failed_runs_tail_shows_its_first_failure_not_only_destroys_output(tmp_path: Path) -> None:
    """Found in CI: a create that failed was reported with its last 40 lines, all of them the
    destroy that followed it; the error itself was further up."""
    log = tmp_path / "r.log"
    body = [f"  1.{i} ok line {i}" for i in range(50)]
    body[10] = '  2.0 │ fatal: [localhost]: FAILED! => {"changed": true, "cmd": ["lab.py", "up"],'
    body[11] = "  2.0 │   error: bundle failed verification: unexpected directory .staging"
    destroy = [f"  9.{i} destroy line {i}" for i in range(40)]
    log.write_text("\n".join(body + destroy) + "\n")
    tail = molecule_scenarios.ScenarioRun("r", 2, 1.0, log).tail(lines=40, context=5)
    shown = tail.splitlines()
    assert shown[:5] == body[10:15] and shown[5] == "[…]" and shown[6:] == destroy
    # no failure before the last lines: those alone, as before
    log.write_text("\n".join(body[:10] + destroy) + "\n")
    assert molecule_scenarios.ScenarioRun("r", 2, 1.0, log).tail(lines=40).splitlines() == destroy


def test_each_scenario_starts_with_molecules_state_empty_whatever_a_run_before_left(tmp_path: Path) -> None:
    """Molecule keeps "created" per role name; a killed run (or one by hand) leaving it would have
    the next create skipped. Each run gets a directory of its own, emptied first."""
    fake = _fake_molecule(
        tmp_path,
        '#!/bin/sh\necho "state=$MOLECULE_EPHEMERAL_DIRECTORY"; ls -A "$MOLECULE_EPHEMERAL_DIRECTORY" 2>/dev/null\n'
        'mkdir -p "$MOLECULE_EPHEMERAL_DIRECTORY" && echo "created: true" > "$MOLECULE_EPHEMERAL_DIRECTORY/state.yml"\n',
    )
    logs = tmp_path / "logs"
    first = molecule_scenarios.run("registry", "mol-x", logs, venv_bin=fake)
    state = molecule_scenarios.ephemeral_dir(logs, "registry")
    assert (state / "state.yml").read_text() == "created: true\n"  # what a killed run would leave
    second = molecule_scenarios.run("registry", "mol-x", logs, venv_bin=fake)
    for run in (first, second):
        lines = [ln.split(maxsplit=1)[1] for ln in run.log.read_text().splitlines()]
        assert lines == [f"state={state}"], lines  # nothing listed: it started empty
    assert molecule_scenarios.ephemeral_dir(logs, "os_prereqs") != state


def test_make_molecule_runs_the_suites_code_shows_each_line_and_stops_at_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make molecule` is `python -m tests._support.molecule_scenarios run ROLE...`: the suite's
    own `run` (its state directory, its log), each line echoed, the first failure ending it."""
    fake = _fake_molecule(tmp_path, "#!/bin/sh\necho converging\nexit 3\n")
    logs = tmp_path / "logs"
    assert molecule_scenarios.main(["run", "registry", "helm"], log_dir=logs, venv_bin=fake) == 1
    out, err = capsys.readouterr()
    assert out.rstrip().endswith(" converging")
    assert err.startswith("molecule: registry failed (rc 3) after ") and str(logs / "registry.log") in err
    assert not (logs / "helm.log").exists()  # never started
    assert (logs / "registry.log").read_text().rstrip().endswith(" converging")
    assert molecule_scenarios.main(["run", "no_such_role"], log_dir=logs) == 2
    assert "roles/no_such_role has no molecule/lab/molecule.yml" in capsys.readouterr().err
    assert molecule_scenarios.main(["walk"], log_dir=logs) == 2


def test_a_scenario_left_running_by_a_killed_test_run_is_stopped_with_its_process_group(
    tmp_path: Path,
) -> None:
    """pytest killed with -9 mid-scenario: molecule (its own session) and what it started live on,
    until the next run's lane stops them by the record the killed run left."""
    fake = _fake_molecule(tmp_path, "#!/bin/sh\nsleep 300 &\necho started $!\nwait\n")
    logs = tmp_path / "logs"
    code = (
        "import sys; from pathlib import Path; from tests._support import molecule_scenarios as m; "
        f"m.run('registry', 'mol-x', Path({str(logs)!r}), venv_bin=Path({str(fake)!r}))"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    log = logs / "registry.log"
    for _ in range(600):
        if log.is_file() and "started" in log.read_text():
            break
        time.sleep(0.05)
    grandchild = int(log.read_text().split()[-1])
    parent.kill()  # as `kill -9` of pytest
    parent.wait()
    time.sleep(0.2)
    assert alive(grandchild)  # the scenario outlived the run that started it
    assert molecule_scenarios.stop_orphan(logs, "other-lab") is None  # another lab's: not this one
    assert molecule_scenarios.stop_orphan(logs, "mol-x") == "registry"
    for _ in range(100):
        if not alive(grandchild):
            break
        time.sleep(0.05)
    assert not alive(grandchild)
    assert molecule_scenarios.stop_orphan(logs, "mol-x") is None  # nothing left to stop


def test_a_scenario_of_a_run_still_alive_is_left_alone(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        (tmp_path / ".mol-x.running").write_text(f"{os.getppid()} {sleeper.pid} registry\n")
        assert molecule_scenarios.stop_orphan(tmp_path, "mol-x") is None
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_each_verify_multiplexes_its_ssh_connections_on_sockets_of_its_own_lab_and_role(
    tmp_path: Path,
) -> None:
    """testinfra's ssh backend gets ansible.cfg's ControlMaster=auto but no ControlPath: without
    the verify ssh config each command was a new connection through the netns proxy. Each
    scenario's sockets are its own, so none reaches nodes an earlier scenario's lab stopped."""
    import yaml

    config = REPO / "tests" / "molecule" / "verify_ssh_config"
    paths = set()
    build, cluster = molecule_scenarios.lanes()
    for role in build + cluster:
        data = yaml.safe_load((REPO / "roles" / role / molecule_scenarios.SCENARIO).read_text())
        assert data["verifier"]["options"]["ssh-config"] == (
            "${MOLECULE_PROJECT_DIRECTORY}/../../tests/molecule/verify_ssh_config"
        ), role
        sockets = data["ansible"]["env"]["MOLECULE_VERIFY_SOCKETS"]
        assert sockets == f"${{APPLIANCE_LAB_NAME:-mol}}-{role}", role
        # what ssh makes of it, for the lane's lab name (ssh -G prints the configuration, connects nowhere)
        env = {**os.environ, "MOLECULE_VERIFY_SOCKETS": sockets.replace("${APPLIANCE_LAB_NAME:-mol}", "mol")}
        got = subprocess.run(
            ["ssh", "-F", str(config), "-G", "localhost"], env=env, capture_output=True, text=True,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert got.returncode == 0, got.stderr
        out = got.stdout
        path = next(line.split(None, 1)[1] for line in out.splitlines() if line.startswith("controlpath "))
        assert path.startswith(f"/tmp/appliance-verify-mol-{role}-"), path
        assert len(path) < 104, path  # a unix socket's path limit (108 with the ssh's own suffix)
        paths.add(path)
    assert len(paths) == 19
