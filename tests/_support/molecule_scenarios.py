"""Every role's molecule scenario on the rehearsal lab (roles/*/molecule/lab), in the two lanes the
suite runs them in, and one scenario run as `make molecule` runs it.

* The build lane: the roles that build the cluster, each starting from the roles before it
  (MOLECULE_LAB_PREPARE), depth first over those states: a scenario whose start is the end of
  the one before it takes that one's lab over, up (tests/molecule/lab.py save-next, with
  MOLECULE_LAB_HAND_TO naming it); one that starts where several do boots from the snapshot
  the scenario it starts after saved.
* The cluster lane: the roles that act on an installed cluster (MOLECULE_LAB_INSTALLED), those on
  the current version first: the first installs the lab and saves it, the others boot from it.
  Then the upgrades: kube_upgrade saves the lab it upgraded, where chart_upgrade starts.

`python -m tests._support.molecule_scenarios` prints every role, build lane first (the Makefile's
`make molecule` order).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests._support.paths import e2e_build_cache
from tests._support.timings import inner_run_env

REPO = Path(__file__).resolve().parents[2]
SCENARIO = "molecule/lab/molecule.yml"
# a failed task (ansible's "fatal: [host]: FAILED!"), or an error a script printed
_FAILURE = re.compile(r"fatal: \[|FAILED!|\berror: |^Traceback \(most recent call last\)")


def scenario_env(role: str, repo: Path = REPO) -> dict[str, str]:
    """The MOLECULE_LAB_* and MOLECULE_UPGRADE_* settings of a role's lab scenario (its `ansible: env:`)."""
    data = yaml.safe_load((repo / "roles" / role / SCENARIO).read_text())
    env = data["ansible"]["env"]
    return {k: str(v) for k, v in env.items() if k.startswith(("MOLECULE_LAB_", "MOLECULE_UPGRADE_"))}


def lanes(repo: Path = REPO) -> tuple[list[str], list[str]]:
    """(build lane, cluster lane): every role that has a lab scenario, in the order it runs."""
    roles = sorted(p.parts[-4] for p in (repo / "roles").glob(f"*/{SCENARIO}"))
    envs = {r: scenario_env(r, repo) for r in roles}

    cluster = [r for r in roles if envs[r].get("MOLECULE_LAB_INSTALLED") == "1"]
    build = [r for r in roles if r not in cluster]
    # Depth first over the states: each role's path is the roles before it and itself, so a
    # scenario comes right after the one whose end is its start (helm, then scheduler_stack), and
    # that one hands it the lab up (lab.py save-next); the others boot from a saved snapshot.
    build.sort(key=lambda r: [*(t for t in envs[r].get("MOLECULE_LAB_PREPARE", "").split(",") if t), r])
    # the upgrades last, the one whose end state the other starts from (MOLECULE_LAB_LEAVES) first
    cluster.sort(
        key=lambda r: (
            bool(envs[r].get("MOLECULE_LAB_OLD")),
            bool(envs[r].get("MOLECULE_UPGRADE_PREPARE")),
            r,
        )
    )
    return build, cluster


@dataclass
class ScenarioRun:
    role: str
    rc: int
    seconds: float
    log: Path

    def tail(self, lines: int = 40, context: int = 30) -> str:
        """The log's last `lines`, after the first failure (`context` lines from it) when that is
        further up: a failed step's own error is followed by destroy's output, and the last
        lines alone would show only that."""
        text = self.log.read_text(errors="replace").splitlines()
        last = len(text) - lines
        first = next((i for i, line in enumerate(text[: max(last, 0)]) if _FAILURE.search(line)), None)
        if first is None:
            return "\n".join(text[-lines:])
        return "\n".join([*text[first : min(first + context, last)], "[…]", *text[-lines:]])


def _running(log_dir: Path, lab: str) -> Path:
    """While a scenario runs on LAB: "<the test run's PID> <the scenario's process group> <role>"."""
    return log_dir / f".{lab}.running"


def stop_orphan(log_dir: Path, lab: str) -> str | None:
    """The scenario a killed test run left running on LAB (that run's PID gone: molecule runs in a
    session of its own, so it outlives a `kill -9` of pytest) killed with its whole process group,
    before the lab is purged under it. Returns its role, or None when there was none. A scenario
    of a run still alive is left alone (its lab's lock holds the caller off)."""
    from appliance_cli.lab.proc import alive

    record = _running(log_dir, lab)
    try:
        owner, pgid, role = record.read_text().split()
    except (OSError, ValueError):
        return None
    if int(owner) != os.getpid() and alive(int(owner)):
        return None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(int(pgid), signal.SIGKILL)
    record.unlink(missing_ok=True)
    return role


def ephemeral_dir(log_dir: Path, role: str) -> Path:
    """Molecule's state for ROLE's scenario in this suite: next to its log, emptied before each run."""
    return log_dir / ".state" / role


def run(
    role: str,
    lab: str,
    log_dir: Path,
    timeout: float = 1800.0,
    venv_bin: Path | None = None,
    echo: bool = False,
    hand_to: str | None = None,
) -> ScenarioRun:
    """`molecule test -s lab` in roles/ROLE on the lab named LAB, as `make molecule` runs it; every
    line of its output goes to LOG_DIR/ROLE.log, stamped with the seconds since the start. Past
    TIMEOUT, or when the caller is interrupted, its whole process group is killed (its destroy then
    has not run: the next scenario's create purges what it left, and the caller's own teardown
    brings the lab down). While it runs, LOG_DIR/.LAB.running names it for stop_orphan. ECHO: each
    line goes to stdout too (`make molecule`)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{role}.log"
    env = inner_run_env()  # the scenario's own pytest (testinfra) reads none of the outer run's settings
    env["PATH"] = f"{venv_bin or Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["APPLIANCE_LAB_NAME"] = lab
    env["MOLECULE_LAB_HAND_TO"] = hand_to or ""  # tests/molecule/lab.py HAND_TO_ENV
    # the e2e lab bundle's build cache: the lanes' bundles and the e2e tests' share one apt closure
    env["APPLIANCE_MOLECULE_BUNDLE_CACHE"] = str(e2e_build_cache())
    # Molecule's own state starts empty: it keeps it per role *name* under ~/.ansible/tmp, where a
    # killed run, or one by hand from another checkout, leaves "created" behind: create would then
    # be skipped and the scenario run on no lab.
    state = ephemeral_dir(log_dir, role)
    shutil.rmtree(state, ignore_errors=True)
    env["MOLECULE_EPHEMERAL_DIRECTORY"] = str(state)
    t0 = time.monotonic()
    with log.open("w", buffering=1) as out:  # line by line: a tail -f, or a killed run, sees it all
        proc = subprocess.Popen(
            ["molecule", "test", "-s", "lab"], cwd=REPO / "roles" / role, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        assert proc.stdout is not None
        record = _running(log_dir, lab)
        record.write_text(f"{os.getpid()} {proc.pid} {role}\n")
        deadline = t0 + timeout
        try:
            for line in proc.stdout:
                stamped = f"{time.monotonic() - t0:7.1f} {line}"
                out.write(stamped)
                if echo:
                    sys.stdout.write(stamped)
                    sys.stdout.flush()
                if time.monotonic() > deadline:
                    os.killpg(proc.pid, signal.SIGKILL)
                    out.write(f"killed after {timeout:.0f} s\n")
                    break
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        finally:
            rc = proc.wait()
            record.unlink(missing_ok=True)
    return ScenarioRun(role, rc, time.monotonic() - t0, log)


def main(argv: list[str], log_dir: Path = REPO / "build" / "molecule", venv_bin: Path | None = None) -> int:
    """No argument: print every role, in `lanes` order. `run ROLE...`: run their scenarios in turn
    on the lab APPLIANCE_LAB_NAME (default mol), as the suite runs them, each line shown as well
    as logged to build/molecule/ROLE.log; stop at the first that fails; after the last, the lab
    goes down (`appliance lab down --purge`)."""
    if not argv:
        build, cluster = lanes()
        print(" ".join(build + cluster))
        return 0
    if argv[0] != "run" or len(argv) < 2:
        print("usage: python -m tests._support.molecule_scenarios [run ROLE...]", file=sys.stderr)
        return 2
    lab = os.environ.get("APPLIANCE_LAB_NAME") or "mol"
    roles = argv[1:]
    for role in roles:
        if not (REPO / "roles" / role / SCENARIO).is_file():
            print(f"molecule: roles/{role} has no {SCENARIO}", file=sys.stderr)
            return 2
    for i, role in enumerate(roles):
        after = roles[i + 1] if i + 1 < len(roles) else None
        done = run(role, lab, log_dir, venv_bin=venv_bin, echo=True, hand_to=after)
        if done.rc != 0:
            print(
                f"molecule: {role} failed (rc {done.rc}) after {done.seconds:.0f} s; its log: {done.log}",
                file=sys.stderr,
            )
            return 1
        print(f"molecule: {role} passed in {done.seconds:.0f} s")
    # destroy keeps a lab made from a snapshot, for the next create: nothing comes next
    env = {**os.environ, "APPLIANCE_LAB_NAME": lab}
    return subprocess.run(
        [sys.executable, "-m", "appliance_cli", "lab", "down", "--purge"], env=env
    ).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
