#!/usr/bin/env python3
"""Molecule's delegated driver on the rehearsal lab, shared by every role's `molecule/lab`.

    lab.py up [--nodes N] [--installed] [--old VERSION]
                            create: build (incremental) + sign + verify the lab bundle, `appliance lab up`;
                            --installed: then the whole install, from its snapshot when there is one;
                            the lab boots straight from the snapshot prepare (or --installed) would
                            restore, when there is one, rather than fresh first and restored after
                            --old: the stick has the old lab bundle at VERSION instead (the e2e upgrade
                            tests' bundle) and the site is at VERSION: the state an upgrade starts from
    lab.py prepare          prepare: the roles MOLECULE_LAB_PREPARE names, or the snapshot of their
                            state (from the snapshot of a shorter run of them, when there is one)
    lab.py save-next ROLE   after verify (the scenario's side_effect, run only when all before it
                            passed): the lab as its prepare and ROLE left it, saved and left down,
                            when another scenario starts from that state; its create then boots it.
                            Handed over instead, up and unsaved, when that scenario is the only one
                            and it runs next (MOLECULE_LAB_HAND_TO names it: the suite's lanes and
                            `make molecule` do): its create takes the running lab, no boot
    lab.py new-stick        prepare of an upgrade: the lab bundle on master1's second stick, verified
                            as `appliance upgrade apply --bundle` verifies it; the inventory then carries
                            what that command passes to upgrade.yml
    lab.py down             destroy: `appliance lab down --purge`; a lab made from a snapshot keeps
                            its nodes' trees (the next create's restore syncs them); a lab handed
                            over stays up for the next scenario
    lab.py --list           dynamic inventory: the lab's own site, rendered exactly as
                            `appliance install --site lab` renders it (hosts.yml + group_vars),
                            plus the manifest digest the bundle gate verified at `up` and the
                            lab's backup identity file (as `appliance restore --identity` passes it)

The lab is named by APPLIANCE_LAB_NAME (as for `appliance lab`); the bundle and its signing key
live under APPLIANCE_MOLECULE_BUNDLES (default /var/lib/appliance/molecule).
Run with the toolkit's venv on PATH (the Makefile does that).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

# Its own directory: a `make demo` or e2e building the demo's bundle at the same time would
# otherwise leave its .staging in the bundle this run verifies.
BUNDLES = Path(os.environ.get("APPLIANCE_MOLECULE_BUNDLES") or "/var/lib/appliance/molecule")
GATE_FILE = "molecule-gate.json"  # in the lab's site directory: what `up` verified
# In the lab's site directory: the snapshot `up` booted the lab from, for the prepare that follows
# (read and removed by it: it restores nothing the lab already is)
START_FILE = "molecule-start.json"
# In the lab's site directory: save-next handed the running lab to the lane's next scenario rather
# than saving it: {"name", "key"} of the state it is in (the snapshot that scenario would boot
# from), "to" (its role). Read and removed by that scenario's create; destroy leaves the lab up.
HANDOVER_FILE = "molecule-handover.json"
# The lane's next scenario (set by tests/_support/molecule_scenarios.py for each one it runs)
HAND_TO_ENV = "MOLECULE_LAB_HAND_TO"
# In the lab's site directory: the lab's age key pair (appliance_cli/lab/sitegen.py writes it)
BACKUP_IDENTITY = "backup-identity.txt"


def appliance(*args: str) -> None:
    """The real `appliance` command, as a user runs it; its output goes to molecule's log."""
    print("+ " + shlex.join(["appliance", *args]), flush=True)
    subprocess.run([sys.executable, "-m", "appliance_cli", *args], check=True)


KEY = BUNDLES / "lab-signing"  # the lab bundles' signing key (KEY.key, KEY.pub)
# The bundles' build cache (default: beside the lab bundle). The suite's lanes give the e2e tests'
# (tests/_support/molecule_scenarios.py): one apt closure, one set of downloads, one apt key for
# every lab bundle of the run, its builds taking the cache in turn (bundle/build.py CACHE_LOCK).
CACHE = os.environ.get("APPLIANCE_MOLECULE_BUNDLE_CACHE") or None


def bundle_dir(old: str | None = None) -> Path:
    """Where the lab bundle is built, or the old lab bundle at version `old`."""
    return BUNDLES / (f"lab-{old}" if old else "lab")


def _repository() -> None:
    """tests._support importable (the e2e tests' bundles and snapshot keys are shared with them)."""
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)


def _old_bundle(version: str) -> Path:
    """The e2e upgrade tests' old lab bundle at `version` (tests/_support/upgrade_bundles.py),
    built with the lab bundle's cache and signed with its key."""
    _repository()
    from appliance_cli.bundle.build import default_cache
    from tests._support.upgrade_bundles import build_old_lab_bundle

    # the lab bundle's cache: the old bundle shares its downloads
    bundle = build_old_lab_bundle(
        bundle_dir(version), Path(CACHE) if CACHE else default_cache(bundle_dir()), version
    )
    appliance("bundle", "sign", str(bundle), "--key", f"{KEY}.key")
    return bundle


def up(nodes: int, old: str | None = None, installed: bool = False) -> None:
    _repository()
    from appliance_cli.core import bundlegate, siteedit
    from appliance_cli.core.siteconfig import SITE_FILE, load_site
    from appliance_cli.lab import snapshot
    from appliance_cli.lab.layout import LabLayout
    from appliance_cli.locks import file_lock

    # Under Mitogen the create task runs in a worker pinned to one CPU, and every lab node would
    # inherit that (kubeadm's NumCPU preflight then fails): give the lab the whole machine.
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    bundle = bundle_dir()
    BUNDLES.mkdir(parents=True, exist_ok=True)
    # The suite runs two lanes of scenarios at once (tests/_support/molecule_scenarios.py): one
    # builds, keys and signs at a time, over the one cache both bundles share
    with file_lock(BUNDLES / ".build.lock"):
        appliance(
            "bundle",
            "build",
            "--profile",
            "lab",
            "--out",
            str(bundle),
            *(["--cache", CACHE] if CACHE else []),
        )
        if not Path(f"{KEY}.key").exists():
            appliance("bundle", "keygen", "--out", str(KEY))
        appliance("bundle", "sign", str(bundle), "--key", f"{KEY}.key")
        stick = _old_bundle(old) if old else bundle
    layout = LabLayout.default()
    site_dir = layout.site_dir
    handed = _handed_over(layout, nodes, old, installed)
    start = None if handed else _start(layout, nodes, old, installed)
    if handed:
        name, key = handed
        print(
            f"lab '{layout.name}' taken over, up, as the scenario before left it ({name}-{key}): no boot",
            flush=True,
        )
        (site_dir / START_FILE).write_text(json.dumps({"name": name, "key": key}) + "\n")
    elif start is None:
        # a lab left by a killed run goes first (restore purges by itself): no destroy precedes
        # create in the scenarios' sequence
        if layout.state_file.exists() or layout.nodes_dir.exists():
            appliance("lab", "down", "--purge")
        appliance("lab", "up", "--nodes", str(nodes), "--bundle", str(stick), "--bundle-key", f"{KEY}.pub")
        if old:
            siteedit.set_kubernetes_version_in_file(site_dir / SITE_FILE, old)
    else:
        # One boot, not two: the fresh lab would only be replaced by this snapshot at once.
        name, key, roles = start
        snapshot.restore(name, key, bundle_key=Path(f"{KEY}.pub"), progress=print)
        if installed:
            _wait_ready()
        else:
            _booted(roles)
        if not installed or roles == [UPGRADED]:  # for prepare, or new-stick: the only readers
            (site_dir / START_FILE).write_text(json.dumps({"name": name, "key": key}) + "\n")
    # The install gate, as `appliance install` runs it: the copy step on master1 then refuses
    # any manifest but the one verified here.
    gate = bundlegate.check(load_site(site_dir))
    print(gate.summary, flush=True)
    (site_dir / GATE_FILE).write_text(json.dumps(gate.extravars) + "\n")
    if installed and start is None and not handed:
        install(nodes, old)


def _wanted(layout: Any, nodes: int, old: str | None, installed: bool) -> tuple[str, str] | None:
    """(name, key) of the state the scenario starts from when another scenario's end can be it:
    the roles before its own (a build scenario), or the lab kube_upgrade upgraded (chart_upgrade).
    None for the scenarios that start from the installed lab: each acts on it (a snapshot, a
    backup, a restore) and starts from it as installed."""
    from tests._support import labsnap

    if installed:
        if old and os.environ.get("MOLECULE_UPGRADE_PREPARE") == "kubernetes":
            return _upgraded_key(layout, nodes, old)
        return None
    tags = _prepare_tags()
    return _prepared_key(layout, tags, nodes, labsnap.tree_digest()) if tags and not old else None


def _handed_over(layout: Any, nodes: int, old: str | None, installed: bool) -> tuple[str, str] | None:
    """The running lab the scenario before handed over (save-next), when it is in the state this
    scenario starts from (the same name and key: the same inputs) and every node of it runs:
    (name, key). Else None, saying why when there was a record: create then boots as usual (a
    restore or a fresh lab, either of which first purges what is there)."""
    from appliance_cli.lab import lifecycle
    from appliance_cli.lab.state import LabState

    record = layout.site_dir / HANDOVER_FILE
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    record.unlink(missing_ok=True)
    if not isinstance(data, dict):  # valid JSON, but not a record save-next writes
        print(
            f"the lab handed over is not taken ({HANDOVER_FILE} holds no record): booted as usual", flush=True
        )
        return None
    want = _wanted(layout, nodes, old, installed)
    state = LabState.load(layout.state_file)
    got = (data.get("name"), data.get("key"))
    why = (
        "this scenario starts from the installed lab" if want is None
        else f"it is in state {got[0]}-{got[1]}, not {want[0]}-{want[1]}" if got != want
        else f"it has not {nodes} nodes" if state is None or state.count != nodes
        else "not every node of it runs" if not all(n.running for n in lifecycle.status())
        else None
    )  # fmt: skip
    if why is not None:
        print(f"the lab handed over is not taken ({why}): booted as usual", flush=True)
        return None
    return want


def _site_text(layout: Any, nodes: int, stick: Path, old: str | None = None) -> str:
    """The lab's appliance.yml as `lab up --nodes N --bundle STICK` writes it (set to version `old`
    after), known before any lab is up: the snapshots' keys hold it."""
    from appliance_cli.core import siteedit
    from appliance_cli.lab import sitegen

    data = sitegen.site_data(layout, nodes, bundle=stick.resolve(), bundle_key=Path(f"{KEY}.pub").resolve())
    text = sitegen.render_site(data)
    return siteedit.set_kubernetes_version(text, old) if old else text


def _prepare_tags() -> list[str]:
    """The roles before the one under test, in site.yml's order (MOLECULE_LAB_PREPARE)."""
    return [t for t in os.environ.get("MOLECULE_LAB_PREPARE", "").split(",") if t]


def _start(layout: Any, nodes: int, old: str | None, installed: bool) -> tuple[str, str, list[str]] | None:
    """The snapshot `up` boots the lab from: the installed lab's with --installed, else the one
    prepare would restore first (_prepared_start). (name, key, the roles it holds: none named for
    the installed lab) or None."""
    from appliance_cli.lab import snapshot
    from tests._support import labsnap

    if installed:
        upgraded = _wanted(layout, nodes, old, installed)  # kube_upgrade's end, for chart_upgrade
        if upgraded is not None and snapshot.exists(layout, *upgraded):
            return *upgraded, [UPGRADED]
        name, key = _installed_key(layout, nodes, old)
        return (name, key, []) if snapshot.exists(layout, name, key) else None
    tags = _prepare_tags()
    return _prepared_start(layout, tags, nodes, labsnap.tree_digest()) if tags and not old else None


def _remove_stale(layout: Any, name: str, key: str) -> None:
    """Snapshot NAME's copies saved from other inputs than KEY's removed, saying so (a stale
    snapshot is never used)."""
    from appliance_cli.lab import snapshot

    for stale in snapshot.others(layout, name, key):
        print(f"snapshot {stale.name} is stale (its inputs changed): removed", flush=True)
        snapshot.remove(stale)


INSTALL_ARGS = ("--skip-diagnose",)  # the installed lab's install


def _base_image(layout: Any) -> Path:
    """The lab's base image, built first if missing (as `lab up` would): snapshot keys hash it, and
    create keys them before any lab is up."""
    from appliance_cli.debian.rootfs import ensure_base_rootfs

    return ensure_base_rootfs(layout.cache_dir)


def _installed_key(layout: Any, nodes: int, old: str | None) -> tuple[str, str]:
    """(snapshot name, key) of the lab as `appliance install --skip-diagnose` leaves it (from the
    old bundle at `old`, which has a name of its own so that the two kinds of scenario do not take
    each other's for stale); tests/_support/labsnap.py keys it."""
    from tests._support import labsnap

    bundle = bundle_dir(old)
    name = f"{layout.name}-{old}" if old else layout.name
    key = labsnap.key(
        lab=name, nodes=nodes, site_text=_site_text(layout, nodes, bundle, old), bundle=bundle,
        public_key=Path(f"{KEY}.pub"), args=INSTALL_ARGS, base_image=_base_image(layout),
    )  # fmt: skip
    return name, key


# The third item of _start's answer for the lab kube_upgrade saved: old bundle installed, the lab
# bundle on the second stick (new-stick), every node upgraded with the charts left as they were.
UPGRADED = "upgraded"


def _upgraded_key(layout: Any, nodes: int, old: str) -> tuple[str, str]:
    """(snapshot name, key) of the installed lab at `old` upgraded by upgrade.yml without the charts
    (kube_upgrade's converge, chart_upgrade's start) to the lab bundle on the second stick."""
    from tests._support import labsnap

    stick = bundle_dir(old)
    name = f"{layout.name}-{old}-{UPGRADED}"
    to = labsnap.bundle_digest(bundle_dir())  # the bundle on the second stick
    key = labsnap.key(
        lab=name, nodes=nodes, site_text=_site_text(layout, nodes, stick, old), bundle=stick,
        public_key=Path(f"{KEY}.pub"), args=(*INSTALL_ARGS, "upgrade.yml", "chart_upgrade_enabled=false", to),
        base_image=_base_image(layout),
    )  # fmt: skip
    return name, key


def install(nodes: int, old: str | None = None) -> None:
    """The freshly created lab installed (`appliance install --skip-diagnose`) and saved, for the
    roles that act on an installed cluster (backup, restore, upgrade); its snapshots from other
    inputs removed first (a stale snapshot is never used). `up` boots from the snapshot when
    there is one, and does not come here."""
    from appliance_cli.lab import snapshot
    from appliance_cli.lab.layout import LabLayout

    layout = LabLayout.default()
    name, key = _installed_key(layout, nodes, old)
    _remove_stale(layout, name, key)
    appliance("install", "--site", str(layout.site_dir), *INSTALL_ARGS)
    snapshot.save(name, key, {}, bundle_key=Path(f"{KEY}.pub"), progress=print)
    _wait_ready()  # saving stopped the nodes and booted them again


def _prepared_key(layout: Any, tags: list[str], nodes: int, product: str) -> tuple[str, str]:
    """(snapshot name, key) of the lab after the roles `tags` (molecule's prepare): the name holds
    a digest of the tag list, so that each role's starting state has a snapshot of its own and the
    scenarios do not take each other's for stale; the key holds everything else it depends on."""
    import hashlib

    from tests._support import labsnap

    name = f"{layout.name}-prep-{hashlib.sha256(','.join(tags).encode()).hexdigest()[:8]}"
    key = labsnap.key(
        lab=name, nodes=nodes, site_text=_site_text(layout, nodes, bundle_dir()), bundle=bundle_dir(),
        public_key=Path(f"{KEY}.pub"), args=("prepare", *tags), base_image=_base_image(layout),
        product=product,
    )  # fmt: skip
    return name, key


def _prepared_start(
    layout: Any, tags: list[str], nodes: int, product: str
) -> tuple[str, str, list[str]] | None:
    """The snapshot of the longest run of the roles `tags` (all of them, first) saved from these
    inputs: (name, key, the roles it holds), or None."""
    from appliance_cli.lab import snapshot

    for n in range(len(tags), 0, -1):
        name, key = _prepared_key(layout, tags[:n], nodes, product)
        if snapshot.exists(layout, name, key):
            return name, key, tags[:n]
    return None


def _run_roles(tags: list[str], registry_installed: bool) -> None:
    """The roles `tags` on the lab: `appliance install --tags` once the registry is there (or comes
    with them); before it, converge_early.yml (`install --tags bundle_repo` fails on a fresh site:
    the always-run registry trust needs a registry)."""
    if registry_installed or "registry" in tags:
        # set-up only: no quick diagnose at its end
        appliance("install", "--site", "lab", "--tags", ",".join(tags), "--skip-diagnose")
        return
    playbook = Path(sys.executable).parent / "ansible-playbook"
    here = Path(__file__).resolve().parent
    argv = [
        str(playbook),
        f"--inventory={here / 'lab.py'}",
        f"--tags={','.join(tags)}",
        str(here / "converge_early.yml"),
    ]
    print("+ " + shlex.join(argv), flush=True)
    subprocess.run(argv, check=True)


def _wait_ready(ready: bool = True, timeout: float = 240.0) -> None:
    """A lab booted from its disks (restored or saved) with Kubernetes on it, waited for as the e2e
    restore waits (tests/_support/lab_nodes.py): the role under test would otherwise meet NotReady
    nodes that no site shows it. Before the pod network, the API server's answer is enough."""
    _repository()
    from tests._support.lab_nodes import wait_booted

    reached, seen = wait_booted(ready, timeout)
    if not reached:
        what = "not every node is Ready" if ready else "the API server does not answer"
        raise SystemExit(f"error: the lab booted from its disks, but {what} after {timeout:.0f} s: {seen}")
    print(f"{'every node Ready' if ready else 'the API server answers'}: {seen}", flush=True)


def _booted(roles: list[str]) -> None:
    """After a restore or a save of the lab as `roles` leave it: Kubernetes answers again, if they
    installed it, and every node is Ready, if the pod network is among them."""
    if "control_plane" in roles:
        _wait_ready("cni_flannel" in roles)


def prepare(tags: list[str]) -> None:
    """Molecule's prepare: the lab as the roles `tags` (in site.yml's order) leave it, the state the
    scenario's role starts from. Restored from its snapshot when there is one. Else from the
    snapshot of the longest run of the same roles that has one (the scenario before it, when
    `make molecule` runs them in order), with the roles after that run; else every role from
    scratch. Then saved, for the next run and the next scenario."""
    if not tags:
        return
    _repository()
    from appliance_cli.lab import snapshot
    from appliance_cli.lab.layout import LabLayout
    from appliance_cli.lab.state import LabState
    from tests._support import labsnap

    # as in up(): the lab's nodes must not inherit a Mitogen worker's single CPU when they boot
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    layout = LabLayout.default()
    pub = Path(f"{KEY}.pub")
    state = LabState.load(layout.state_file)
    if state is None:
        raise SystemExit(f"error: lab '{layout.name}' is not up: molecule's create brings it up")
    # What create booted the lab from, if anything: read once, and gone before any save copies
    # the site directory (a later prepare restores again)
    record = layout.site_dir / START_FILE
    booted = json.loads(record.read_text()) if record.is_file() else None
    record.unlink(missing_ok=True)
    nodes = state.count
    product = labsnap.tree_digest()
    name, key = _prepared_key(layout, tags, nodes, product)
    if booted == {"name": name, "key": key} and not snapshot.exists(layout, name, key):
        # create took over the lab the scenario before handed over, in this very state
        print(
            f"lab '{layout.name}' is as {tags[-1]} and the roles before it left it: nothing to run",
            flush=True,
        )
        return
    start = _prepared_start(layout, tags, nodes, product)
    if start is None or start[2] != tags:
        _remove_stale(layout, name, key)
    done: list[str] = []
    if start is not None:
        base, base_key, done = start
        if booted == {"name": base, "key": base_key}:
            print(
                f"lab '{layout.name}' was booted from snapshot {base} by create: nothing to restore",
                flush=True,
            )
        else:
            snapshot.restore(base, base_key, bundle_key=pub, progress=print)
            _booted(done)
    if done == tags:
        return
    _run_roles(tags[len(done) :], registry_installed="registry" in done)
    snapshot.save(name, key, {"roles": tags}, bundle_key=pub, progress=print)
    _booted(tags)  # saving stopped the nodes and booted them again


def _starts_from(tags: list[str]) -> list[str]:
    """The roles whose lab scenario starts from the lab as the roles `tags` leave it."""
    _repository()
    from tests._support.molecule_scenarios import lanes, scenario_env

    build, _ = lanes()
    return [r for r in build if scenario_env(r).get("MOLECULE_LAB_PREPARE", "") == ",".join(tags)]


def _upgrades_from(old: str, leaves: str) -> list[str]:
    """The upgrade scenarios at `old` whose prepare starts where `leaves` ends (kubernetes: every
    node upgraded, the charts not)."""
    _repository()
    from tests._support.molecule_scenarios import lanes, scenario_env

    _, cluster = lanes()
    envs = {r: scenario_env(r) for r in cluster}
    return [
        r for r, e in envs.items() if leaves and e.get("MOLECULE_LAB_OLD") == old and e.get("MOLECULE_UPGRADE_PREPARE") == leaves
    ]  # fmt: skip


def save_next(role: str) -> None:
    """After the scenario of ROLE passed converge, idempotence and verify: the lab, as its prepare
    and ROLE left it, saved under the key of that role list (prepare's) and left down for destroy,
    when a scenario starts from it. That scenario's create boots from it, and its prepare runs no
    role (before, it ran ROLE a third time, and booted the lab again after saving it)."""
    _repository()
    from appliance_cli.fsutil import atomic_write
    from appliance_cli.lab import snapshot
    from appliance_cli.lab.layout import LabLayout
    from appliance_cli.lab.state import LabState
    from tests._support import labsnap

    old = os.environ.get("MOLECULE_LAB_OLD") or None
    layout = LabLayout.default()
    state = LabState.load(layout.state_file)
    if old:  # an upgrade's scenario: what MOLECULE_LAB_LEAVES says it leaves
        tags = [os.environ.get("MOLECULE_LAB_LEAVES", "")]
        nexts = _upgrades_from(old, tags[0])
    else:
        tags = [*_prepare_tags(), role]
        nexts = _starts_from(tags)
    if not nexts:
        print(f"no scenario starts from the lab as {','.join(tags)} leave it: nothing saved", flush=True)
        return
    if state is None:
        raise SystemExit(f"error: lab '{layout.name}' is not up: nothing to save")
    if old:
        name, key = _upgraded_key(layout, state.count, old)
    else:
        name, key = _prepared_key(layout, tags, state.count, labsnap.tree_digest())
    if nexts == [os.environ.get(HAND_TO_ENV)]:
        # The one scenario that starts here runs next: the lab is its start as it stands. Saving
        # would stop the nodes and copy their trees, and its create would boot them again.
        atomic_write(
            layout.site_dir / HANDOVER_FILE, json.dumps({"name": name, "key": key, "to": nexts[0]}) + "\n"
        )
        print(f"the start of {nexts[0]}, which runs next: the lab is handed over up, not saved", flush=True)
        return
    if snapshot.exists(layout, name, key):
        print(f"snapshot {name}-{key} exists (the start of {', '.join(nexts)}): nothing saved", flush=True)
        return
    _remove_stale(layout, name, key)
    snapshot.save(name, key, {"roles": tags}, bundle_key=Path(f"{KEY}.pub"), progress=print, boot=False)
    print(f"the start of {', '.join(nexts)}", flush=True)


UPGRADE_VARS_FILE = "molecule-upgrade.json"  # in the lab's site directory: what new-stick verified


def new_stick() -> None:
    """The lab bundle (built at `up`) linked onto master1 at the second stick, verified as
    `appliance upgrade apply --bundle` verifies it (signature, manifest, a version not older than
    the site's), and the variables that command passes to upgrade.yml for its last pass: the
    verified manifest, the target version (the plan's), the stick as the master sees it."""
    _repository()
    from appliance_cli.core import bundlegate, upgradestate
    from appliance_cli.core.siteconfig import load_site
    from appliance_cli.lab.layout import LabLayout
    from tests._support.upgrade_lab import put_on_new_stick

    layout = LabLayout.default()
    record = layout.site_dir / START_FILE
    # create booted (or took over) the lab kube_upgrade left: the stick and its variables are in it
    if record.is_file():
        booted = json.loads(record.read_text())
        record.unlink()
        print(
            f"lab '{layout.name}' was booted from (or taken over as) {booted['name']} by create: {UPGRADED}",
            flush=True,
        )
        return
    bundle = bundle_dir()
    stick = put_on_new_stick(layout, bundle)
    cfg = load_site(layout.site_dir)
    gate = bundlegate.check(cfg, bundle=str(bundle), key=f"{KEY}.pub", upgrade=True)
    print(gate.summary, flush=True)
    plan = upgradestate.plan(cfg, bundle)
    if plan.empty:
        raise SystemExit(f"error: {bundle}: nothing to upgrade to from the installed lab")
    extravars = gate.extravars | {
        "appliance_kubernetes_version": plan.passes[-1],
        "appliance_bundle_source": stick,
    }
    print(f"upgrade.yml's variables: {extravars}", flush=True)
    (layout.site_dir / UPGRADE_VARS_FILE).write_text(json.dumps(extravars) + "\n")


def down() -> None:
    """Molecule's destroy: the lab down and purged; but a lab whose nodes' trees were made from a
    snapshot (create booted it from one, or save-next saved it) keeps them: the next create that
    boots from that snapshot puts back only what changed since (snapshot.restore), and one that
    boots from another removes them first, as a purge would have."""
    from appliance_cli.lab.layout import LabLayout
    from appliance_cli.lab.snapshot import RESTORED

    layout = LabLayout.default()
    handover = layout.site_dir / HANDOVER_FILE
    if handover.is_file() and layout.state_file.exists():
        print(
            f"lab '{layout.name}' stays up: handed over to {json.loads(handover.read_text()).get('to')}",
            flush=True,
        )
        return
    if not (layout.nodes_dir / RESTORED).is_file():
        appliance("lab", "down", "--purge")
        return
    if layout.state_file.exists():
        appliance("lab", "down")
    print(f"lab '{layout.name}' is down; its nodes' trees, made from a snapshot, are kept", flush=True)


def _walk(name: str, node: dict[str, Any] | None, out: dict[str, Any]) -> None:
    """One group of a YAML inventory into the script-inventory JSON form."""
    node = node or {}
    group = out.setdefault(name, {"hosts": [], "vars": {}, "children": []})
    for host, hostvars in (node.get("hosts") or {}).items():
        group["hosts"].append(host)
        out["_meta"]["hostvars"].setdefault(host, {}).update(hostvars or {})
    group["vars"].update(node.get("vars") or {})
    for child, child_node in (node.get("children") or {}).items():
        group["children"].append(child)
        _walk(child, child_node, out)


def inventory() -> dict[str, Any]:
    """The running lab's inventory; empty while no lab is up (create and destroy run on localhost)."""
    from appliance_cli.core.inventory import render_inventory
    from appliance_cli.core.siteconfig import load_site
    from appliance_cli.lab.layout import LabLayout

    out: dict[str, Any] = {"_meta": {"hostvars": {}}}
    site_dir = LabLayout.default().site_dir
    if not (site_dir / "appliance.yml").is_file():
        return out
    rendered = render_inventory(load_site(site_dir))
    _walk("all", yaml.safe_load(rendered.hosts_file.read_text()).get("all"), out)
    out["all"]["vars"].update(yaml.safe_load(rendered.group_vars_file.read_text()) or {})
    for extra in (GATE_FILE, UPGRADE_VARS_FILE):  # the upgrade's, once new-stick wrote it, last
        if (site_dir / extra).is_file():
            out["all"]["vars"].update(json.loads((site_dir / extra).read_text()))
    # what `appliance restore --identity` passes: the lab's backup key pair (its backups are encrypted)
    if (site_dir / BACKUP_IDENTITY).is_file():
        out["all"]["vars"]["etcd_restore_identity_file"] = str((site_dir / BACKUP_IDENTITY).resolve())
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--list"]:
        json.dump(inventory(), sys.stdout)
    elif argv[:1] == ["--host"]:
        json.dump({}, sys.stdout)  # every host's vars are in --list's _meta
    elif argv[:1] == ["up"]:
        nodes = int(argv[argv.index("--nodes") + 1]) if "--nodes" in argv else 2
        old = argv[argv.index("--old") + 1] if "--old" in argv else None
        up(nodes, old, installed="--installed" in argv)
    elif argv[:1] == ["prepare"]:
        prepare(_prepare_tags())
    elif argv[:1] == ["save-next"] and len(argv) == 2:
        save_next(argv[1])
    elif argv[:1] == ["new-stick"]:
        new_stick()
    elif argv[:1] == ["down"]:
        down()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
