"""`up`, `down`, `status`, `ssh_argv`: the lab's Python API (the CLI only renders it).

Everything started is recorded (state file + PID files) and torn down by PID, after checking the
PID still runs the command we started; namespaces and cgroups are removed by their recorded names.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from appliance_cli.debian.rootfs import ensure_base_rootfs
from appliance_cli.errors import ApplianceError, LabError, UsageError
from appliance_cli.lab import aptrepo, cgroups, filer, netns, proc, sitegen
from appliance_cli.lab.layout import MAX_NODES, LabLayout
from appliance_cli.lab.node import LabNode, create_rootfs, ensure_keypair, host_keys, marker, refresh_identity
from appliance_cli.lab.prereq import check_prerequisites, ensure_host_limits
from appliance_cli.lab.state import LabState, NodeState
from appliance_cli.lab.supervisor import MARKER, NodeSpec
from appliance_cli.locks import file_lock

Progress = Callable[[str], None]
BOOT_TIMEOUT = 90.0
STOP_TIMEOUT = 20.0
# master1 also runs userspace NFS (nfs-ganesha needs these two syscalls).
MASTER_EXTRA_SYSCALLS = ["open_by_handle_at", "name_to_handle_at"]


@dataclass(frozen=True)
class LabInfo:
    name: str
    site_dir: Path
    ssh_config: Path
    nodes: list[LabNode]
    apt_repo_url: str
    already_up: bool = False


@dataclass(frozen=True)
class NodeStatus:
    name: str
    address: str
    running: bool
    pid: int | None
    ssh: bool


def _quiet(_: str) -> None:
    return None


def up(
    nodes: int = 4,
    rebuild: bool = False,
    progress: Progress | None = None,
    bundle: Path | None = None,
    bundle_key: Path | None = None,
) -> LabInfo:
    """Bring the lab up. `bundle`: a built bundle directory on the host, bound read-only into
    master1 where a field engineer's USB stick would be mounted; `bundle_key`: its public key,
    recorded in the lab's site config for `appliance install`."""
    say = progress or _quiet
    if not 1 <= nodes <= MAX_NODES:
        raise UsageError(f"--nodes must be between 1 and {MAX_NODES}, got {nodes}")
    if bundle is not None:
        bundle = bundle.expanduser().resolve()
        if not (bundle / "manifest.json").is_file():
            raise UsageError(
                f"--bundle {bundle}: no manifest.json there",
                hint="build one: appliance bundle build --profile lab",
            )
    if bundle_key is not None:
        bundle_key = bundle_key.expanduser().resolve()
        if not bundle_key.is_file():
            raise UsageError(f"--bundle-key {bundle_key}: no such file")
    check_prerequisites()
    raised = ensure_host_limits(nodes)
    if raised:
        say(
            "host limits raised for the nodes' shared kernel: "
            + ", ".join(f"{k}={v}" for k, v in raised.items())
        )
    layout = LabLayout.default()
    for d in (layout.dir, layout.logs_dir, layout.run_dir, layout.nodes_dir):
        d.mkdir(parents=True, exist_ok=True)
    with file_lock(layout.dir / ".lock"):
        old = LabState.load(layout.state_file)
        if old is not None:
            current = _status(layout, old)
            if not rebuild and current and all(s.running and s.ssh for s in current):
                if old.count != nodes:
                    raise LabError(
                        f"lab '{layout.name}' is already up with {old.count} nodes",
                        hint="`appliance lab down` first to change the node count",
                    )
                if bundle is not None and old.bundle != str(bundle):
                    raise LabError(
                        f"lab '{layout.name}' is already up with "
                        + (f"bundle {old.bundle}" if old.bundle else "no bundle")
                        + " on master1's USB mount",
                        hint=f"`appliance lab down` first to plug in {bundle}",
                    )
                say(f"lab '{layout.name}' is already up ({old.count} nodes)")
                return _info(layout, old, already_up=True)
            say("lab partly up: stopping what is left before bringing it up again")
            _teardown(layout, old, say)
        try:
            return _up(layout, nodes, rebuild, say, bundle, bundle_key)
        except BaseException:
            # Leave nothing running or half-wired behind; rootfs and logs stay for inspection.
            state = LabState.load(layout.state_file)
            if state is not None:
                _teardown(layout, state, _quiet)
            raise


def _up(
    layout: LabLayout, count: int, rebuild: bool, say: Progress, bundle: Path | None, bundle_key: Path | None
) -> LabInfo:
    base = ensure_base_rootfs(layout.cache_dir, rebuild=rebuild)
    say(f"base rootfs ready ({base})")
    repo = aptrepo.ensure_repo(layout.cache_dir, base, rebuild=rebuild)
    say(f"offline apt repo ready ({repo})")

    cfg = sitegen.write_site(layout, count, bundle=bundle, bundle_key=bundle_key)
    pubkey = ensure_keypair(layout.site_dir)
    nodes = sitegen.lab_nodes(cfg)
    state = LabState(
        name=layout.name,
        count=count,
        nodes=[NodeState(name=n.name, index=n.index, address=n.address) for n in nodes],
        bundle=str(bundle) if bundle else None,
    )
    state.save(layout.state_file)

    state.netns = netns.lab_namespaces(layout, count)  # recorded first: a failure half-way is undone
    state.save(layout.state_file)
    netns.up(layout, count)
    say(f"network up ({layout.netns}: br0 {layout.bridge_address}/24, {count} node namespaces)")

    http_pid = aptrepo.start_server(layout, repo)
    aptrepo.wait_server(layout, http_pid)
    say(f"apt repo served at {layout.apt_repo_url} (pid {http_pid})")

    fresh = [n for n in nodes if rebuild or not marker(layout, n.name).is_file()]
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        list(pool.map(lambda n: create_rootfs(layout, n, base), fresh))
        list(pool.map(lambda n: refresh_identity(layout, n, nodes, pubkey), nodes))
    say(f"node rootfs ready ({len(fresh)} created, {len(nodes) - len(fresh)} reused)")

    keys = {n.name: host_keys(layout, n.name) for n in nodes}
    sitegen.write_ssh_files(layout, nodes, keys, cfg.ssh.user)

    for n, ns in zip(nodes, state.nodes, strict=True):
        ns.cgroups = [str(d) for d in cgroups.node_cgroup_dirs(layout.cgroup_name(n.name))]
        ns.spec = str(layout.run_dir / f"{n.name}.json")
    state.save(layout.state_file)
    for n, ns in zip(nodes, state.nodes, strict=True):
        _start_node(layout, n, ns, state.bundle)
    if state.bundle:
        say(f"bundle {state.bundle} plugged into master1 at {sitegen.LAB_USB_MOUNT} (read-only)")
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        for took, n in pool.map(lambda n: _wait_node(layout, n), nodes):
            say(f"{n.name} up ({n.address}, sshd answering after {took:.1f}s)")
        t0 = time.monotonic()
        list(pool.map(lambda n: _wait_booted(layout, n), nodes))
    say(f"boot finished on every node ({time.monotonic() - t0:.1f}s more)")
    master = next(n for n in nodes if n.is_master)
    if cfg.nfs is not None and cfg.nfs.server == master.address:
        took = filer.setup(_node_ssh_argv(layout, master.name), layout.apt_repo_url, cfg.nfs.path)
        say(f"NFS filer on {master.name}: nfs-ganesha exports {cfg.nfs.server}:{cfg.nfs.path} ({took:.1f}s)")
    return _info(layout, state)


def replace_node(name: str, progress: Progress | None = None) -> LabInfo:
    """A node lost with its disk, replaced by a fresh machine of the same name and address (the
    master-rebuild drill): the node powered off, its rootfs made again from the base image (nothing
    installed, new SSH host keys), booted; the other nodes run on. The site's known_hosts then holds
    the new host keys, as `appliance hosts trust` would record them after checking the console; on
    master1 the lab's NFS filer is set up again, empty (its disk was lost too)."""
    from appliance_cli.core.siteconfig import load_site  # the site as installed (a test may edit it)

    say = progress or _quiet
    check_prerequisites()
    layout = LabLayout.default()
    with file_lock(layout.dir / ".lock"):
        state = LabState.load(layout.state_file)
        if state is None:
            raise LabError(f"lab '{layout.name}' is not up", hint="`appliance lab up` first")
        ns = next((x for x in state.nodes if x.name == name), None)
        if ns is None:
            raise UsageError(
                f"no node {name} in lab '{layout.name}'",
                hint=f"its nodes: {', '.join(x.name for x in state.nodes)}",
            )
        cfg = load_site(layout.site_dir)
        nodes = sitegen.lab_nodes(cfg)
        node = next(n for n in nodes if n.name == name)
        problem = _stop_node(layout, ns)
        if problem:
            raise LabError(problem, hint=f"see {layout.logs_dir}")
        say(f"{name} powered off")
        create_rootfs(layout, node, ensure_base_rootfs(layout.cache_dir))
        refresh_identity(layout, node, nodes, ensure_keypair(layout.site_dir))
        sitegen.write_ssh_files(
            layout, nodes, {n.name: host_keys(layout, n.name) for n in nodes}, cfg.ssh.user
        )
        say(f"{name}: a fresh rootfs from the base image, new host keys recorded")
        ns.cgroups = [str(d) for d in cgroups.node_cgroup_dirs(layout.cgroup_name(name))]
        _start_node(layout, node, ns, state.bundle)
        took, _ = _wait_node(layout, node)
        _wait_booted(layout, node)
        say(f"{name} up ({node.address}, sshd answering after {took:.1f}s)")
        if node.is_master and cfg.nfs is not None and cfg.nfs.server == node.address:
            took = filer.setup(_node_ssh_argv(layout, name), layout.apt_repo_url, cfg.nfs.path)
            say(f"NFS filer on {name} set up again, empty ({took:.1f}s)")
        return _info(layout, state)


def _wait_booted(layout: LabLayout, n: LabNode) -> None:
    """sshd answers before the boot is over; a login then waits on logind and user@.service
    (pam_systemd), long enough to hit ansible's become timeout. Wait for the boot to finish."""
    argv = _node_ssh_argv(layout, n.name, ["systemctl", "is-system-running", "--wait"])
    try:
        r = subprocess.run(
            argv, capture_output=True, text=True, timeout=BOOT_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise LabError(
            f"{n.name}: boot did not finish within {BOOT_TIMEOUT:.0f}s",
            hint=f"see {layout.console_log(n.name)}",
        ) from None
    state = r.stdout.strip()
    if state not in ("running", "degraded"):  # degraded: a unit the lab cannot run (e.g. rpc_pipefs)
        raise LabError(
            f"{n.name}: boot ended in state '{state or r.stderr.strip()}'",
            hint=f"see {layout.console_log(n.name)}",
        )


def _start_node(layout: LabLayout, n: LabNode, ns: NodeState, bundle: str | None) -> None:
    dirs = [Path(d) for d in ns.cgroups]
    cgroups.create(dirs)
    spec = NodeSpec(
        name=n.name,
        index=n.index,
        machine=layout.machine_name(n.name),
        rootfs=str(layout.node_root(n.name)),
        netns=layout.node_netns(n.index),
        cgroup_dirs=ns.cgroups,
        nspawn_pidfile=str(layout.nspawn_pidfile(n.name)),
        ready_file=str(layout.ready_file(n.name)),
        events_file=str(layout.logs_dir / f"{n.name}.events"),
        extra_syscalls=MASTER_EXTRA_SYSCALLS if n.is_master else [],
        binds_ro=[f"{bundle}:{sitegen.LAB_USB_MOUNT}"] if bundle and n.is_master else [],
    )
    spec.write(Path(ns.spec))
    layout.ready_file(n.name).unlink(missing_ok=True)
    with layout.console_log(n.name).open("a") as log:
        p = subprocess.Popen(
            [sys.executable, "-m", MARKER, ns.spec],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    layout.supervisor_pidfile(n.name).write_text(f"{p.pid}\n")


def _wait_node(layout: LabLayout, n: LabNode) -> tuple[float, LabNode]:
    t0 = time.monotonic()
    pid = proc.read_pid(layout.supervisor_pidfile(n.name))
    while time.monotonic() - t0 < BOOT_TIMEOUT:
        if layout.ready_file(n.name).is_file() and netns.ssh_ready(layout.netns, n.address, timeout=0.5):
            return time.monotonic() - t0, n
        if not proc.alive(pid):
            raise LabError(f"{n.name}: node stopped while booting", hint=f"see {layout.console_log(n.name)}")
        time.sleep(0.1)
    raise LabError(
        f"{n.name}: sshd did not answer within {BOOT_TIMEOUT:.0f}s",
        hint=f"see {layout.console_log(n.name)} and {layout.logs_dir / (n.name + '.events')}",
    )


def _info(layout: LabLayout, state: LabState, already_up: bool = False) -> LabInfo:
    nodes = [LabNode(index=n.index, name=n.name, address=n.address) for n in state.nodes]
    return LabInfo(
        name=layout.name,
        site_dir=layout.site_dir,
        ssh_config=layout.site_dir / sitegen.SSH_CONFIG,
        nodes=nodes,
        apt_repo_url=layout.apt_repo_url,
        already_up=already_up,
    )


def down(purge: bool = False, progress: Progress | None = None) -> None:
    say = progress or _quiet
    check_prerequisites()
    layout = LabLayout.default()
    if not layout.dir.exists():
        say(f"lab '{layout.name}' does not exist")
        return
    with file_lock(layout.dir / ".lock"):
        state = LabState.load(layout.state_file)
        if state is None:
            say(f"lab '{layout.name}' is not up")
        else:
            _teardown(layout, state, say)
        if purge:
            for d in (layout.nodes_dir, layout.site_dir, layout.run_dir):
                shutil.rmtree(d, ignore_errors=True)
            say(f"node rootfs and site removed (cache kept: {layout.cache_dir})")


def _teardown(layout: LabLayout, state: LabState, say: Progress) -> None:
    problems: list[str] = []
    if state.nodes:
        with ThreadPoolExecutor(max_workers=len(state.nodes)) as pool:
            for msg in pool.map(lambda ns: _stop_node(layout, ns), state.nodes):
                if msg:
                    problems.append(msg)
        say(f"{len(state.nodes)} nodes stopped")
    aptrepo.stop_server(layout)
    log = layout.logs_dir / "network.log"
    for name in state.netns:
        try:
            netns.delete(name, log)
        except ApplianceError as exc:
            problems.append(exc.message)
    say("network removed")
    layout.state_file.unlink(missing_ok=True)
    if problems:
        raise LabError(f"teardown incomplete: {problems[0]}", hint=f"see {layout.logs_dir}")


def _stop_node(layout: LabLayout, ns: NodeState) -> str | None:
    pid = proc.read_pid(layout.supervisor_pidfile(ns.name))
    nspawn = proc.read_pid(layout.nspawn_pidfile(ns.name))
    if proc.owned(pid, MARKER):
        # SIGTERM -> supervisor forwards it to nspawn -> the node's systemd powers off cleanly.
        proc.terminate(pid or 0, STOP_TIMEOUT)
    if proc.owned(nspawn, "systemd-nspawn"):
        proc.terminate(nspawn or 0, 2, sig=signal.SIGKILL)
    dirs = [Path(d) for d in ns.cgroups]
    for left in cgroups.pids(dirs):  # whatever still runs in the node's own cgroups is the node's
        with contextlib.suppress(ProcessLookupError):
            os.kill(left, signal.SIGKILL)
    not_removed = cgroups.remove(dirs)
    shutil.rmtree(f"/run/systemd/nspawn/propagate/{layout.machine_name(ns.name)}", ignore_errors=True)
    for f in (layout.supervisor_pidfile(ns.name), layout.nspawn_pidfile(ns.name), layout.ready_file(ns.name)):
        f.unlink(missing_ok=True)
    if not_removed:
        return f"{ns.name}: cgroup {not_removed[0]} could not be removed"
    return None


def _status(layout: LabLayout, state: LabState) -> list[NodeStatus]:
    out = []
    for n in state.nodes:
        pid = proc.read_pid(layout.supervisor_pidfile(n.name))
        running = proc.owned(pid, MARKER) and layout.ready_file(n.name).is_file()
        ssh = running and netns.ssh_ready(layout.netns, n.address, timeout=1.0)
        out.append(
            NodeStatus(name=n.name, address=n.address, running=running, pid=pid if running else None, ssh=ssh)
        )
    return out


def status() -> list[NodeStatus]:
    layout = LabLayout.default()
    state = LabState.load(layout.state_file)
    return _status(layout, state) if state else []


def ssh_argv(node: str, command: list[str] | None = None) -> list[str]:
    """argv that runs `command` (or a login shell) on a lab node, host key verified."""
    layout = LabLayout.default()
    state = LabState.load(layout.state_file)
    config = layout.site_dir / sitegen.SSH_CONFIG
    if state is None or not config.is_file():
        raise LabError(f"lab '{layout.name}' is not up", hint="run `appliance lab up` first")
    names = [n.name for n in state.nodes]
    if node not in names:
        raise UsageError(f"no node '{node}' in lab '{layout.name}' (nodes: {', '.join(names)})")
    return _node_ssh_argv(layout, node, command)


def _node_ssh_argv(layout: LabLayout, node: str, command: list[str] | None = None) -> list[str]:
    """Through the lab's ssh_config: its key, its known_hosts (host keys verified), its netns proxy."""
    return ["ssh", "-F", str(layout.site_dir / sitegen.SSH_CONFIG), node, *(command or [])]
