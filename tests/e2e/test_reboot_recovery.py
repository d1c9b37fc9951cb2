"""Back after a reboot, by itself (the appliance guide: "if a node has failed and has immediately
restarted, all services will automatically start"). Every node of the installed lab reboots, the
master first, then the workers together, and nothing is run again: the services the install set
up are back, swap is still off, the sysctls and the module list still set, every node Ready and
the registry serves a pull. Destructive on a real site: only with APPLIANCE_E2E_DESTRUCTIVE=1.

The lab's nodes reboot for real: `systemctl reboot` ends the node's systemd-nspawn with exit 133
and the lab's supervisor starts it again from the same disk (appliance_cli/lab/supervisor.py);
each node keeps its network namespace, as a host keeps its NIC."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = pytest.mark.usefixtures("installs")

MARK = "/run/appliance-e2e-before-reboot"  # /run is a tmpfs: a boot empties it
REBOOT_UNIT = "appliance-e2e-reboot"
KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
READY = 'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}'


def _ssh(ssh_config, node: str, command: str, timeout: float) -> subprocess.CompletedProcess | None:
    """`command` as root on `node`, with keepalives and a deadline: a node going down under an
    ssh session leaves it hanging otherwise. None: no answer in time."""
    argv = ["ssh", "-F", str(ssh_config), "-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=3",
            "-o", "ServerAliveCountMax=2", node, f"sudo sh -c {shlex.quote(command)}"]  # fmt: skip
    try:
        return subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def _reboot(ssh_config, node: str, timeout: float = 180) -> float:
    """Reboot `node` (in a second, so that this session ends first) and wait until it answers from
    a new boot whose systemd finished starting; -> seconds it took."""
    r = _ssh(
        ssh_config,
        node,
        f"touch {MARK} && systemd-run --on-active=1 --unit={REBOOT_UNIT} systemctl reboot",
        30,
    )
    assert r is not None and r.returncode == 0, f"{node}: {r.stderr if r else 'no answer'}"
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        r = _ssh(ssh_config, node, f"test ! -e {MARK} && timeout 60 systemctl is-system-running --wait", 75)
        if r is not None and r.stdout.strip() in ("running", "degraded"):
            return time.monotonic() - started
        time.sleep(2)
    raise AssertionError(f"{node}: not back {timeout:.0f} s after `systemctl reboot`")


@pytest.fixture(scope="module")
def rebooted(site, ssh_config) -> dict[str, float]:
    if os.environ.get("APPLIANCE_E2E_SITE") and os.environ.get("APPLIANCE_E2E_DESTRUCTIVE") != "1":
        pytest.skip("reboots every node: set APPLIANCE_E2E_DESTRUCTIVE=1 to run it on a real site")
    took = {site.master.name: _reboot(ssh_config, site.master.name)}
    workers = [n.name for n in site.nodes if n.name != site.master.name]
    with ThreadPoolExecutor(len(workers) or 1) as pool:
        took.update(zip(workers, pool.map(lambda n: _reboot(ssh_config, n), workers), strict=True))
    print("reboot, back and booted:", ", ".join(f"{n} {s:.1f} s" for n, s in took.items()))
    return took


def test_every_node_is_ready_again_with_nothing_run(site, hosts, rebooted):
    master = hosts[site.master.name]
    end, seen = time.monotonic() + 240, ""
    while time.monotonic() < end:
        r = master.run(f"{KUBECTL} get nodes -o {shlex.quote(READY)}")
        seen = r.stdout.strip() or r.stderr.strip()
        if r.rc == 0 and seen and all(x.endswith("=True") for x in seen.split()):
            break
        time.sleep(2)
    assert sorted(seen.split()) == sorted(f"{n.name}=True" for n in site.nodes), seen
    r = master.run(f"{KUBECTL} get --raw /readyz")
    assert (r.rc, r.stdout.strip()) == (0, "ok"), r.stderr


def test_the_services_the_install_set_up_are_running_again(site, hosts, rebooted):
    master = site.master.name
    for name, host in hosts.items():
        wanted = ["containerd", "kubelet", "chrony"]
        if name == master:
            wanted += ["docker-registry", "appliance-bundle-http"]
        down = [s for s in wanted if not (host.service(s).is_running and host.service(s).is_enabled)]
        assert not down, f"{name}: not running after the reboot: {down}"


def test_swap_sysctls_and_modules_stay_set(hosts, rebooted):
    for name, host in hosts.items():
        assert len(host.file("/proc/swaps").content_string.strip().splitlines()) == 1, name  # the header only
        assert host.sysctl("net.ipv4.ip_forward") == 1, name
        assert host.sysctl("net.bridge.bridge-nf-call-iptables") == 1, name
        f = host.file("/etc/modules-load.d/kubernetes.conf")
        assert f.contains("^overlay$") and f.contains("^br_netfilter$"), name


def test_the_registry_serves_a_pull(site, hosts, rebooted):
    """containerd asks the registry for the manifest of an image it holds: a pull the registry does
    not answer fails."""
    worker = hosts[next(n.name for n in site.nodes if n.name != site.master.name)]
    listing = "crictl images -o json | python3 -c \"import json, sys; print(*(t for i in json.load(sys.stdin)['images'] for t in i['repoTags']))\""
    tags = worker.check_output(listing).split()
    ref = next(t for t in tags if t.startswith(f"{site.registry.address}/"))
    out = worker.check_output(f"crictl pull {shlex.quote(ref)}")
    assert out.startswith("Image is up to date for "), out
