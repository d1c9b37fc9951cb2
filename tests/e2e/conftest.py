"""End-to-end fixtures. By default they bring up the rehearsal lab (needs root) and tear it down
even when tests fail. Given APPLIANCE_E2E_SITE=DIR they run unchanged against a real appliance's
site directory instead (nothing is brought up or torn down then)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import testinfra

from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.lab.layout import LabLayout

E2E_NODES = int(os.environ.get("APPLIANCE_E2E_NODES", "4"))
RECAP = re.compile(r"^RECAP (\S+) ok=(\d+) changed=(\d+) failed=(\d+) unreachable=(\d+) skipped=(\d+)$", re.M)


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


# CI gives `.ci/run` 90 minutes for everything (bootstrap, lint, unit, integration, these modules,
# molecule), and on a slow, shared machine the whole e2e suite can take longer than that: then
# nothing of the run counts. So once the test run has used APPLIANCE_E2E_BUDGET_S (0: no budget),
# no further e2e module starts; one already started runs to its end (a lab is never left half-way).
# Each module not started is reported as skipped, with the command that runs it alone.
E2E_BUDGET_S = float(os.environ.get("APPLIANCE_E2E_BUDGET_S", "3300"))
_RUN_STARTED = time.monotonic()  # this conftest is imported at collection, before any test runs
_modules_started: set[str] = set()


@pytest.hookimpl(tryfirst=True)  # before any fixture of the module (its lab) is set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    module = str(item.fspath)
    if module in _modules_started:
        return
    spent = time.monotonic() - _RUN_STARTED
    if E2E_BUDGET_S and spent > E2E_BUDGET_S:
        pytest.skip(
            f"the test run's time budget was spent ({spent / 60:.0f} min, APPLIANCE_E2E_BUDGET_S={E2E_BUDGET_S:.0f}) "
            f"before this module started: run it alone with `pytest {os.path.relpath(module)}`"
        )
    _modules_started.add(module)


@dataclass
class CliRun:
    rc: int
    out: str
    err: str
    recap: dict[str, dict[str, int]] = field(default_factory=dict)


def appliance(*args: str, timeout: int = 900) -> CliRun:
    """The real `appliance` command, as a user runs it."""
    r = subprocess.run(
        [sys.executable, "-m", "appliance_cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ | {"CI": "1"},
    )
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
def lab_bundle(tmp_path_factory) -> SignedBundle:
    """The lab profile built on the spot (incremental: the build cache is kept between runs) and
    signed with a key made for this session, as `appliance bundle build|keygen|sign` do."""
    if os.geteuid() != 0:
        pytest.fail("building the lab bundle needs root (the apt closure is resolved in a chroot)")
    from appliance_cli.bundle import BuildOptions, build_bundle, keygen, sign_bundle
    from appliance_cli.lab.layout import LabLayout

    # APPLIANCE_E2E_BUNDLE_ROOT: a build of one's own, where several people share the machine's cache
    root = Path(os.environ.get("APPLIANCE_E2E_BUNDLE_ROOT") or LabLayout.default().cache_dir / "e2e-bundle")
    res = build_bundle(BuildOptions(profile="lab", out=root / "bundle", cache=root / "build-cache"))
    keys = tmp_path_factory.mktemp("bundle-key")
    priv, pub, _ = keygen(keys / "lab")
    sign_bundle(res.path, priv)
    return SignedBundle(res.path, pub)


@pytest.fixture(scope="session")
def site(request) -> Iterator[SiteConfig]:
    real = os.environ.get("APPLIANCE_E2E_SITE")
    if real:
        yield load_site(real)
        return
    if os.geteuid() != 0:
        pytest.fail("the lab e2e tests need root (systemd-nspawn, network namespaces): run them with sudo")
    bundle: SignedBundle = request.getfixturevalue("lab_bundle")
    from appliance_cli import lab

    try:
        with _session_lab_env():
            # A lab of this name left by a killed session would be reused as it is (installed):
            # every session starts from fresh node rootfs (the cached base image is kept).
            lab.down(purge=True)
            info = lab.up(nodes=E2E_NODES, bundle=bundle.path, bundle_key=bundle.public_key)
        os.environ.setdefault("APPLIANCE_LAB_NAME", SESSION_LAB["APPLIANCE_LAB_NAME"] or "e2e")
        yield load_site(info.site_dir)
    finally:
        with _session_lab_env():
            lab.down(purge=True)


# The session lab's name, fixed when the session starts: a module running in a lab of its own
# (own_lab) may be the first to ask for `site`, and must not lend the session lab its name.
SESSION_LAB = {"APPLIANCE_LAB_NAME": os.environ.get("APPLIANCE_LAB_NAME") or "e2e",
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
def dry_run_before_install(site: SiteConfig, hosts) -> DryRun:
    """`appliance install --check --diff` before anything was installed (on a real site that
    may be installed already, the test that reads this knows)."""
    run = appliance("install", "--site", str(site.site_dir), "--check", "--diff")
    master = hosts[site.master.name]
    return DryRun(run, master.file(f"{site.bundle.path}/manifest.json").exists)


@pytest.fixture(scope="session")
def installs(site: SiteConfig, dry_run_before_install: DryRun) -> list[CliRun]:
    """`appliance install` twice: the first run does the work, the second must change nothing.
    The dry run before them comes first, whichever test asks first."""
    runs = []
    for _ in range(2):
        run = appliance("install", "--site", str(site.site_dir))
        runs.append(run)
        if run.rc != 0:
            break
    return runs


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
    try:
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


@pytest.fixture(scope="session")
def own_lab_cm():
    """`with own_lab_cm(NAME[, nodes]) as layout:` — see own_lab()."""
    return own_lab
