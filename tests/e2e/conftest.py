"""End-to-end fixtures. By default they bring up the rehearsal lab (needs root) and tear it down
even when tests fail. Given APPLIANCE_E2E_SITE=DIR they run unchanged against a real appliance's
site directory instead (nothing is brought up or torn down then)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
import testinfra

from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.lab.layout import LabLayout
from appliance_cli.locks import file_lock
from tests._support import labsnap
from tests._support.paths import e2e_build_cache, e2e_bundle_root
from tests._support.timings import NOT_STARTED_FOR_TIME, Pace, starts_in_time

E2E_NODES = int(os.environ.get("APPLIANCE_E2E_NODES", "4"))
RECAP = re.compile(r"^RECAP (\S+) ok=(\d+) changed=(\d+) failed=(\d+) unreachable=(\d+) skipped=(\d+)$", re.M)


# The order modules are dispatched in, with the time each took in a whole run (setup and tests,
# s), which the deadline below reads. The order carries no meaning for the tests (each module
# starts from its own lab or a restored snapshot): the two lanes of molecule scenarios first (the
# longest), then the ones that guard against lost data (faults, kills, lost nodes, backup,
# restore, upgrades), then the rest, longer ones first, so that two test processes pack well and
# what starts near the deadline is short. The first two alternate a lab of their own and the
# session lab: the second process does not wait while the first installs (node_add_remove
# installs the 2-node lab's, which three more modules restore later: one that asks for a
# snapshot while another process installs it waits for that). The times: the fresh-clone run of
# f78b9c6 on this machine, a slow day (its build/suite-times-e2e.json; the seven modules it did
# not start, from their run alone right after). faults' includes the session lab's first install
# (about 390 s): it was the first of its process to ask for it. A new module goes last, with the
# longest figure, until it is placed here.
# `make e2e` keeps this order (--no-loadscope-reorder: xdist would sort by tests per module).
MODULE_SECONDS = {
    "test_molecule_build_roles.py": 1572, "test_faults.py": 1120, "test_molecule_cluster_roles.py": 855,
    "test_node_add_remove.py": 485, "test_kill_points.py": 414, "test_unreachable_mid_run.py": 278,
    "test_upgrade_apply_lab.py": 455, "test_restore_lab.py": 286, "test_master_rebuild_lab.py": 377,
    "test_apiserver_down.py": 288, "test_run_locks.py": 192,
    "test_node_remove_unreachable.py": 144, "test_upgrade_minor_lab.py": 177, "test_preflight_failures.py": 71,
    "test_node_maintenance.py": 125, "test_backup_lab.py": 70,
    "test_scheduler_runai.py": 328, "test_kubernetes.py": 188, "test_researcher_access.py": 332,
    "test_researcher_registry.py": 177, "test_docker_runtime.py": 171, "test_scheduler_open.py": 179,
    "test_storage_nfs.py": 171, "test_diagnose_lab.py": 374,
    "test_gpu_platform.py": 138, "test_install.py": 200, "test_preflight.py": 113, "test_os_prereqs_state.py": 71,
    "test_bundle_on_site.py": 124, "test_reboot_recovery.py": 90, "test_acceptance_refused.py": 86,
    "test_support_bundle_lab.py": 59, "test_toolkit_from_stick.py": 50, "test_lab_lifecycle.py": 22,
    "test_upgrade_plan_lab.py": 29,
}  # fmt: skip
ORDER = tuple(MODULE_SECONDS)


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
    stale = sorted(set(ORDER) - {p.name for p in Path(__file__).parent.glob("test_*.py")})
    if stale:
        raise pytest.UsageError(f"tests/e2e/conftest.py ORDER names no such module: {', '.join(stale)}")

    def rank(item: pytest.Item) -> int:
        name = Path(str(item.fspath)).name
        if "/e2e/" not in str(item.fspath):
            return -1  # unit and integration first, as they were
        return ORDER.index(name) if name in ORDER else len(ORDER)  # a new module: last, until placed

    items.sort(key=rank)  # stable: each module's tests keep their order


# The e2e deadline: the whole suite runs inside CI's 90 minutes, and a run that would not fails,
# naming what it did not run. A module starts only when it would end by APPLIANCE_E2E_DEADLINE_S
# (0: none), counted from when ./make.sh began (APPLIANCE_RUN_STARTED: bootstrap and lint
# included, as CI counts), else from the e2e run's collection: the time spent, plus the module's
# figure in MODULE_SECONDS at the pace this test process has kept so far (Pace: what its modules
# took against their figures). One that would not fails each of its tests at once (no lab is
# brought up for it), naming the module and the command that runs it alone; a shorter one after
# it may still start; the run ends with the list (pytest_terminal_summary). 5200 s leaves 200 s of
# CI's 5400 for a module slower than its figure and the session labs coming down. The rule before
# (no module started past 4600 s of the e2e run, whatever it cost) kept 300 s back for the one
# that might start last, and CI's run of fdb98c9 (4952 s in all, 60 s of them before the e2e run)
# still lost 48 tests to it, most of them in modules of a minute or two.
# The deadline only turns a machine too slow for CI into a failure that says so, where a skip
# would pass in silence.
E2E_DEADLINE_S = float(os.environ.get("APPLIANCE_E2E_DEADLINE_S", "5200"))


def _run_started() -> float:
    """When the deadline counts from, on the monotonic clock: ./make.sh's start, else now (this
    conftest is imported at collection, before any test runs)."""
    began = os.environ.get("APPLIANCE_RUN_STARTED", "")
    before = time.time() - float(began) if re.fullmatch(r"[0-9]{1,12}", began) else 0.0
    return time.monotonic() - min(max(before, 0.0), 86400.0)


_RUN_STARTED = _run_started()
_RUN_WALL_START = time.time()
_modules_started: set[str] = set()
_PACE = Pace()
_running: list[tuple[float, float]] = []  # this process's module under way: (its figure, its start)


@pytest.hookimpl(tryfirst=True)  # before any fixture of the module (its lab) is set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    module = str(item.fspath)
    if module in _modules_started:
        return
    now = time.monotonic()
    if _running:  # the module before this one (in this process) has ended
        figure, began = _running.pop()
        _PACE.add(figure, now - began)
    spent = now - _RUN_STARTED
    figure = MODULE_SECONDS.get(Path(module).name, max(MODULE_SECONDS.values()))
    if not starts_in_time(spent, figure, _PACE, E2E_DEADLINE_S):
        pytest.fail(
            f"{NOT_STARTED_FOR_TIME} ({spent / 60:.0f} min spent, about {figure * _PACE.factor / 60:.0f} more "
            f"needed, APPLIANCE_E2E_DEADLINE_S={E2E_DEADLINE_S:.0f}): run it alone with `pytest {os.path.relpath(module)}`",
            pytrace=False,
        )
    _modules_started.add(module)
    _running.append((figure, now))


@dataclass
class CliRun:
    rc: int
    out: str
    err: str
    recap: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CliRun:
        return cls(**data)


# Each `appliance` command run through appliance() below: (subcommand, wall s, controller
# core-s). The CPU is the command's whole process tree (ansible-playbook and its workers
# included), from this process's reaped-children usage before and after: appliance() waits for it
# alone. Printed at the end by subcommand, so the share of the e2e run that installs take is seen.
CLI_RUNS: list[tuple[str, float, float]] = []


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def appliance(*args: str, timeout: int = 900) -> CliRun:
    """The real `appliance` command, as a user runs it."""
    started, cpu = time.monotonic(), _children_cpu()
    r = subprocess.run(
        [sys.executable, "-m", "appliance_cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ | {"CI": "1"},
    )
    CLI_RUNS.append((args[0] if args else "", time.monotonic() - started, _children_cpu() - cpu))
    recap = {
        m[0]: dict(zip(("ok", "changed", "failed", "unreachable", "skipped"), map(int, m[1:]), strict=True))
        for m in RECAP.findall(r.stdout)
    }
    return CliRun(r.returncode, r.stdout, r.stderr, recap)


@dataclass(frozen=True)
class SignedBundle:
    path: Path
    public_key: Path


@pytest.fixture(scope="session")
def lab_bundle() -> SignedBundle:
    """The lab profile built on the spot (incremental: the build cache is kept between runs) and
    signed, as `appliance bundle build|keygen|sign` do. The key is made once and kept beside the
    build cache (root only), so an unchanged bundle keeps its signature and its lab snapshots."""
    if os.geteuid() != 0:
        pytest.fail("building the lab bundle needs root (the apt closure is resolved in a chroot)")
    from appliance_cli.bundle import BuildOptions, build_bundle, keygen, sign_bundle

    root = e2e_bundle_root()
    with file_lock(root / ".e2e.lock"):  # two test processes build and sign it one after the other
        res = build_bundle(BuildOptions(profile="lab", out=root / "bundle", cache=e2e_build_cache()))
        key = root / "signing" / "lab"
        if not (Path(f"{key}.key").is_file() and Path(f"{key}.pub").is_file()):
            keygen(key, force=True)
        sign_bundle(res.path, Path(f"{key}.key"))
    return SignedBundle(res.path, Path(f"{key}.pub"))


# --- installed labs, from snapshots --------------------------------------------------------------
# An e2e module that needs an installed lab gets one restored from a snapshot of that configuration
# (tests/_support/labsnap.py says what names it). The first install of a configuration is the
# install test itself: what it printed is kept with the snapshot, and a module restored from it
# reads the same runs. Whatever a module breaks dies with its copy.


SNAPSHOT_EVENTS: list[str] = []  # what this run did with snapshots, printed at its end


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)  # an xdist worker: to the controller
    if workeroutput is not None:
        workeroutput["snapshot_events"] = list(SNAPSHOT_EVENTS)
        workeroutput["cli_runs"] = list(CLI_RUNS)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's: a worker has finished
def pytest_testnodedown(node, error) -> None:
    SNAPSHOT_EVENTS.extend(getattr(node, "workeroutput", {}).get("snapshot_events", []))
    CLI_RUNS.extend(tuple(r) for r in getattr(node, "workeroutput", {}).get("cli_runs", []))


def pytest_terminal_summary(terminalreporter) -> None:
    not_run: dict[str, int] = {}
    for report in terminalreporter.stats.get("error", []) + terminalreporter.stats.get("failed", []):
        if NOT_STARTED_FOR_TIME in str(report.longrepr):
            module = report.nodeid.split("::", 1)[0]
            not_run[module] = not_run.get(module, 0) + 1
    if not_run:
        terminalreporter.section(f"NOT RUN for time: {len(not_run)} modules, {sum(not_run.values())} tests")
        for module, count in not_run.items():
            terminalreporter.write_line(f"{module} ({count} tests): run it alone with `pytest {module}`")
    if CLI_RUNS:
        _cli_table(terminalreporter)
    if SNAPSHOT_EVENTS:
        terminalreporter.section("installed-lab snapshots")
        for line in SNAPSHOT_EVENTS:
            terminalreporter.write_line(line)


def _cli_table(tr) -> None:
    by: dict[str, list[tuple[float, float]]] = {}
    for sub, wall, cpu in CLI_RUNS:
        by.setdefault(sub, []).append((wall, cpu))
    tr.section("appliance commands the e2e tests ran through conftest's appliance() (s)")
    tr.write_line(f"{'command':<14} {'runs':>5} {'wall':>8} {'mean':>7} {'max':>7} {'core-s':>8}")
    for sub, rows in sorted(by.items(), key=lambda kv: -sum(w for w, _ in kv[1])):
        walls = [w for w, _ in rows]
        total = sum(walls)
        tr.write_line(
            f"{sub:<14} {len(rows):5d} {total:8.1f} {total / len(walls):7.1f} {max(walls):7.1f} "
            f"{sum(c for _, c in rows):8.1f}"
        )
    tr.write_line(f"{'all':<14} {len(CLI_RUNS):5d} {sum(r[1] for r in CLI_RUNS):8.1f}")


@dataclass
class Installed:
    layout: LabLayout
    name: str  # the snapshot's name (the lab's, or the one labs share)
    key: str
    restored: bool  # True: restored from a snapshot an earlier run saved, not installed by this one
    runs: dict[str, Any]  # "installs": [CliRun, ...]; "dry_run": CliRun; "dry_run_left_bundle": bool
    bundle: SignedBundle

    @property
    def site_dir(self) -> Path:
        return self.layout.site_dir

    @property
    def installs(self) -> list[CliRun]:
        return self.runs["installs"]


def _encode_runs(runs: dict[str, Any]) -> dict[str, Any]:
    return {k: ([r.to_json() for r in v] if k == "installs" else v.to_json() if isinstance(v, CliRun) else v)
            for k, v in runs.items()}  # fmt: skip


def _decode_runs(data: dict[str, Any]) -> dict[str, Any]:
    return {k: ([CliRun.from_json(r) for r in v] if k == "installs" else CliRun.from_json(v) if k == "dry_run" else v)
            for k, v in data.items()}  # fmt: skip


def wait_ready(layout: LabLayout, timeout: float = 240.0) -> None:
    """A lab booted from its installed rootfs: every node Ready again (tests/_support/lab_nodes.py)."""
    from tests._support.lab_nodes import wait_booted

    ready, seen = wait_booted(timeout=timeout)
    if not ready:
        pytest.fail(
            f"lab '{layout.name}' booted from its snapshot, but not every node is Ready after {timeout:.0f}s: {seen}"
        )


def _master_has(layout: LabLayout, path: str) -> bool:
    from appliance_cli.lab.lifecycle import ssh_argv

    return subprocess.run(ssh_argv("master1", ["test", "-e", path]), stdin=subprocess.DEVNULL).returncode == 0


def install_lab(
    nodes: int,
    bundle: SignedBundle,
    edit: Callable[[dict[str, Any]], None] | None = None,
    args: tuple[str, ...] = ("--skip-diagnose",),
    dry_run: bool = False,
    rerun: bool = False,
    share: str | None = None,
) -> Installed:
    """The lab named by APPLIANCE_LAB_NAME, installed with the lab site (`edit`ed first) by
    `appliance install ARGS` (after `--check --diff` with dry_run; twice with rerun): restored from
    its snapshot when one with the same inputs exists, else installed here and saved when the
    install succeeded (and the re-run changed nothing). `share`: the snapshot's name, when labs of
    several names start from it (the session labs of two test processes); else the lab's own."""
    from appliance_cli.debian.rootfs import ensure_base_rootfs
    from appliance_cli.lab import sitegen, snapshot

    layout = LabLayout.default()
    base = ensure_base_rootfs(layout.cache_dir)  # before the key: it is one of its inputs
    name = share or layout.name
    data = sitegen.site_data(layout, nodes, bundle=bundle.path, bundle_key=bundle.public_key)
    if edit is not None:
        edit(data)
    site_text = sitegen.render_site(data)  # as `lab up` writes it
    key = labsnap.key(
        lab=name, nodes=nodes, site_text=site_text.replace(sitegen.proxy_command(layout), "@LAB-PROXY@"),
        bundle=bundle.path, public_key=bundle.public_key, args=(*args, f"dry_run={dry_run}", f"rerun={rerun and _rerun_args(args)}"),
        base_image=base,
    )  # fmt: skip
    _own(layout)
    # One process installs a configuration; another that wants it meanwhile waits, then restores it.
    with file_lock(snapshot.store(layout) / f".{name}-{key}.lock"):
        if labsnap.reuse_enabled() and snapshot.exists(layout, name, key):
            t0 = time.monotonic()
            snapshot.restore(name, key, bundle_key=bundle.public_key)
            t1 = time.monotonic()
            wait_ready(layout)
            SNAPSHOT_EVENTS.append(
                f"{layout.name}: restored from snapshot {name}-{key} (its inputs are unchanged): "
                f"copied and booted {t1 - t0:.0f} s, every node Ready {time.monotonic() - t1:.0f} s later"
            )
            return Installed(
                layout, name, key, True, _decode_runs(snapshot.meta(layout, name, key)["extra"]), bundle
            )
        return _install_and_save(
            layout, name, key, nodes, site_text if edit else None, bundle, args, dry_run, rerun
        )


def _rerun_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """What the re-run adds to the install's arguments: it is there to show that the roles change
    nothing (--full: every role runs, where a plain re-run finds nothing changed and runs none), and
    the quick diagnose that would end it (35-45 s on 4 nodes) is the first install's."""
    return ("--full",) if "--skip-diagnose" in args else ("--skip-diagnose", "--full")


def _install_and_save(
    layout: LabLayout, name: str, key: str, nodes: int, edited_site: str | None, bundle: SignedBundle,
    args: tuple[str, ...], dry_run: bool, rerun: bool,
) -> Installed:  # fmt: skip
    from appliance_cli import lab
    from appliance_cli.core.siteconfig import SITE_FILE
    from appliance_cli.lab import snapshot

    # made from other inputs: never reused, so not kept; but never one this run saved (the other
    # test process may be restoring it: two keys for one name in one run is a bug, not staleness)
    stale = [p for p in snapshot.others(layout, name, key) if _saved_before_this_run(p / snapshot.META)]
    for old in stale:
        snapshot.remove(old)
    SNAPSHOT_EVENTS.append(
        f"{layout.name}: installed afresh; "
        + (f"snapshot {', '.join(p.name for p in stale)} is stale (inputs changed): removed" if stale
           else "no snapshot of it yet" if labsnap.reuse_enabled() else "APPLIANCE_E2E_SNAPSHOTS=0")
    )  # fmt: skip
    t0 = time.monotonic()
    lab.down(purge=True)
    lab.up(nodes=nodes, bundle=bundle.path, bundle_key=bundle.public_key)
    took = {"lab up": time.monotonic() - t0}
    if edited_site is not None:
        (layout.site_dir / SITE_FILE).write_text(edited_site)
    site = ["--site", str(layout.site_dir)]
    runs: dict[str, Any] = {"installs": []}
    if dry_run:
        t0 = time.monotonic()
        runs["dry_run"] = appliance("install", *site, "--check", "--diff")
        manifest = f"{load_site(layout.site_dir).bundle.path}/manifest.json"
        runs["dry_run_left_bundle"] = _master_has(layout, manifest)
        took["dry run"] = time.monotonic() - t0
    t0 = time.monotonic()
    for again in range(2 if rerun else 1):
        run = appliance("install", *site, *args, *_rerun_args(args) if again else (), timeout=1800)
        runs["installs"].append(run)
        if run.rc != 0:
            break
    ok = all(r.rc == 0 for r in runs["installs"]) and len(runs["installs"]) == (2 if rerun else 1)
    if ok and rerun:
        ok = all(v["changed"] == 0 for v in runs["installs"][1].recap.values())
    took["installs"] = time.monotonic() - t0
    if ok:
        t0 = time.monotonic()
        snapshot.save(name, key, _encode_runs(runs), bundle_key=bundle.public_key)
        wait_ready(layout)
        took["save and Ready again"] = time.monotonic() - t0
        SNAPSHOT_EVENTS.append(
            f"{layout.name}: saved as snapshot {name}-{key} ("
            + ", ".join(f"{what} {secs:.0f} s" for what, secs in took.items())
            + ")"
        )
    return Installed(layout, name, key, False, runs, bundle)


def _saved_before_this_run(meta: Path) -> bool:
    try:
        return meta.stat().st_mtime < _RUN_WALL_START
    except FileNotFoundError:
        return True


# The 2-node lab site as installed, one snapshot shared by the modules that start from it.
TWO_NODE_LAB = "two"


# --- labs this run starts are owned by its PID --------------------------------------------------
OWNER_FILE = "e2e-owner.pid"


def _own(layout: LabLayout) -> None:
    layout.dir.mkdir(parents=True, exist_ok=True)
    (layout.dir / OWNER_FILE).write_text(f"{os.getpid()}\n")


def _sweep_abandoned_labs() -> None:
    """Labs a killed test run started (its PID is gone) are torn down and purged: by their own
    state files, as `appliance lab down --purge` does. Labs nobody's test run owns are left alone."""
    from appliance_cli import lab
    from appliance_cli.lab.proc import alive, read_pid

    labs = LabLayout.default().dir.parent
    for owner in sorted(labs.glob(f"*/{OWNER_FILE}")) if labs.is_dir() else []:
        pid = read_pid(owner)
        if pid is not None and pid != os.getpid() and alive(pid):
            continue
        with open(labs / f".{owner.parent.name}.e2e.lock", "a") as held:
            try:  # a test process of this run that holds it is using the lab: leave it alone
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            saved = {k: os.environ.get(k) for k in ("APPLIANCE_LAB_NAME", "APPLIANCE_LAB_DIR")}
            try:
                os.environ["APPLIANCE_LAB_NAME"] = owner.parent.name
                os.environ.pop("APPLIANCE_LAB_DIR", None)
                lab.down(purge=True)
                owner.unlink(missing_ok=True)
            finally:
                _set_env(saved)


# --- the session lab: the 4-node lab site, installed -------------------------------------------


@dataclass
class SessionLab:
    installed: Installed | None  # None on a real site (APPLIANCE_E2E_SITE)
    site: SiteConfig
    runs: dict[str, Any]
    dirty: bool = False

    def fresh(self) -> None:
        """Back to the installed snapshot, if a module before this one used the lab."""
        if self.installed is None or not self.dirty:
            return
        from appliance_cli.lab import snapshot

        with _session_lab_env():
            snapshot.restore(
                self.installed.name, self.installed.key, bundle_key=self.installed.bundle.public_key
            )
            wait_ready(self.installed.layout)
        self.dirty = False

    def rest(self) -> None:
        """A module that used the lab is done: its nodes stopped until the next module restores
        them (fresh() stops them first anyway). An idle 4-node lab burns about 4.5 core-s a minute
        (README), which the other test process's lab wants while this one runs labs of its own."""
        self.dirty = True
        if self.installed is None:
            return
        from appliance_cli.lab import lifecycle

        with _session_lab_env():
            lifecycle.down()


@pytest.fixture(scope="session")
def session_lab(request) -> Iterator[SessionLab]:
    if os.environ.get("APPLIANCE_E2E_SITE"):
        site: SiteConfig = request.getfixturevalue("site")
        dry = appliance("install", "--site", str(site.site_dir), "--check", "--diff")
        left = (
            request.getfixturevalue("hosts")[site.master.name]
            .file(f"{site.bundle.path}/manifest.json")
            .exists
        )
        installs = []
        for again in range(2):
            installs.append(
                appliance("install", "--site", str(site.site_dir), *_rerun_args(()) if again else ())
            )
            if installs[-1].rc != 0:
                break
        yield SessionLab(None, site, {"dry_run": dry, "dry_run_left_bundle": left, "installs": installs})
        return
    if os.geteuid() != 0:
        pytest.fail("the lab e2e tests need root (systemd-nspawn, network namespaces): run them with sudo")
    bundle: SignedBundle = request.getfixturevalue("lab_bundle")
    from appliance_cli import lab

    _sweep_abandoned_labs()
    held = contextlib.ExitStack()
    try:
        with _session_lab_env():
            held.enter_context(
                file_lock(LabLayout.default().dir.parent / f".{SESSION_LAB['APPLIANCE_LAB_NAME']}.e2e.lock")
            )
            inst = install_lab(E2E_NODES, bundle, args=(), dry_run=True, rerun=True, share=SESSION_SNAPSHOT)
        os.environ.setdefault("APPLIANCE_LAB_NAME", SESSION_LAB["APPLIANCE_LAB_NAME"] or "e2e")
        yield SessionLab(inst, load_site(inst.site_dir), inst.runs)
    finally:
        with _session_lab_env():
            lab.down(purge=True)
        held.close()


@pytest.fixture(scope="module", autouse=True)
def _session_lab_as_installed(request) -> Iterator[None]:
    """Every module that uses the session lab starts from it as installed (restored from its
    snapshot when a module before it used it), so no module depends on another's leftovers."""
    mine = [i for i in request.session.items if i.module is request.module]
    # by the fixture closure, not by a name: a module that defines `site` or `installs` of its own
    # (test_scheduler_runai's lab) does not use the session lab, and must not restore it
    if not any("session_lab" in i.fixturenames for i in mine):
        yield
        return
    session: SessionLab = request.getfixturevalue("session_lab")
    session.fresh()
    yield
    session.rest()


@pytest.fixture(scope="session")
def site(request) -> SiteConfig:
    real = os.environ.get("APPLIANCE_E2E_SITE")
    if real:
        return load_site(real)
    return request.getfixturevalue("session_lab").site


# The session lab's name, fixed when the session starts: a module running in a lab of its own
# (own_lab) may be the first to ask for `site`, and must not lend the session lab its name.
# Under pytest-xdist (`make e2e` runs two labs at once) each worker has a session lab of its own,
# both restored from one snapshot (the first to need it installs it, the other waits for it).
SESSION_SNAPSHOT = "session"
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
SESSION_LAB = {"APPLIANCE_LAB_NAME": (os.environ.get("APPLIANCE_LAB_NAME") or "e2e") + (f"-{_WORKER}" if _WORKER else ""),
               "APPLIANCE_LAB_DIR": os.environ.get("APPLIANCE_LAB_DIR")}  # fmt: skip


def _set_env(values: dict[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextlib.contextmanager
def _session_lab_env() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in SESSION_LAB}
    try:
        _set_env(SESSION_LAB)
        yield
    finally:
        _set_env(saved)


@pytest.fixture(scope="session")
def ssh_config(site: SiteConfig, tmp_path_factory) -> Path:
    """An ssh_config derived from the site config alone, so the same tests reach a real site."""
    lines = []
    for n in site.nodes:
        lines += [
            f"Host {n.name}",
            f"  HostName {n.address}",
            f"  User {site.ssh.user}",
            f"  Port {site.ssh.port}",
            f"  UserKnownHostsFile {site.resolve(site.ssh.known_hosts)}",
            "  StrictHostKeyChecking yes",
            "  BatchMode yes",
            "  LogLevel ERROR",
        ]
        if site.ssh.private_key:
            lines.append(f"  IdentityFile {site.resolve(site.ssh.private_key)}")
        if site.ssh.proxy_command:
            lines.append(f"  ProxyCommand {site.ssh.proxy_command}")
    path = tmp_path_factory.mktemp("ssh") / "config"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def hosts(site: SiteConfig, ssh_config: Path) -> dict[str, testinfra.host.Host]:
    return {
        n.name: testinfra.get_host(f"ssh://{n.name}", ssh_config=str(ssh_config), sudo=True)
        for n in site.nodes
    }


@dataclass
class DryRun:
    run: CliRun
    bundle_on_master_after: bool  # whether the dry run left a bundle copy on the master


@pytest.fixture(scope="session")
def dry_run_before_install(session_lab: SessionLab) -> DryRun:
    """`appliance install --check --diff` before anything was installed (on a real site that
    may be installed already, the test that reads this knows)."""
    return DryRun(session_lab.runs["dry_run"], session_lab.runs["dry_run_left_bundle"])


@pytest.fixture(scope="session")
def installs(session_lab: SessionLab) -> list[CliRun]:
    """`appliance install` twice: the first run does the work, the second must change nothing.
    The dry run came before them. In the lab these are the runs that installed its snapshot."""
    return session_lab.runs["installs"]


@pytest.fixture(scope="session")
def cli():
    """`appliance ARGS...` as a user runs it -> CliRun (rc, out, err, recap)."""
    return appliance


@contextlib.contextmanager
def own_lab(name: str, nodes: int | None = None, bundle: SignedBundle | None = None) -> Iterator[LabLayout]:
    """A lab of its own for one test module (APPLIANCE_LAB_NAME=name while it runs), always torn
    down and purged at the end, even when the test failed half-way; the caller's lab env is restored.
    With `bundle`, master1 has it as its stick (the lab can then be installed)."""
    from appliance_cli import lab

    saved = {k: os.environ.get(k) for k in ("APPLIANCE_LAB_NAME", "APPLIANCE_LAB_DIR")}
    os.environ["APPLIANCE_LAB_NAME"] = name
    os.environ.pop("APPLIANCE_LAB_DIR", None)  # a private state dir for this lab
    # Two modules of one run may want the same lab (one snapshot): the second waits for the first.
    held = contextlib.ExitStack()
    try:
        held.enter_context(file_lock(LabLayout.default().dir.parent / f".{name}.e2e.lock"))
        _own(LabLayout.default())
        lab.down(purge=True)  # a leftover of a killed session is not reused (see `site`)
        if nodes is not None:
            lab.up(
                nodes=nodes, **({"bundle": bundle.path, "bundle_key": bundle.public_key} if bundle else {})
            )
        yield LabLayout.default()
    finally:
        try:
            lab.down(purge=True)
        finally:
            _set_env(saved)
            held.close()


@pytest.fixture(scope="session")
def own_lab_cm():
    """`with own_lab_cm(NAME[, nodes]) as layout:` — see own_lab()."""
    return own_lab


@contextlib.contextmanager
def installed_lab(name: str, nodes: int, bundle: SignedBundle, **kw: Any) -> Iterator[Installed]:
    """A lab of its own (see own_lab), installed: install_lab(nodes, bundle, **kw) — restored
    from the snapshot of the same configuration when there is one."""
    with own_lab(name):
        yield install_lab(nodes, bundle, **kw)


@pytest.fixture(scope="session")
def installed_lab_cm():
    """`with installed_lab_cm(NAME, nodes, bundle[, edit=, args=]) as inst:` — see installed_lab()."""
    return installed_lab
