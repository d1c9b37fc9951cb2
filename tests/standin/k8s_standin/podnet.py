"""A pod's network, as containerd's CRI sets it up in RunPodSandbox (through go-cni and libcni): a
network namespace /var/run/netns/cni-<id>, then the node's first CNI network config in conf_dir run
plugin by plugin (ADD in order, each given the previous result; DEL in reverse), with the plugins
from bin_dir: the real ones (bridge, host-local, portmap, loopback from Debian's
containernetworking-plugins) and flannel's stand-in.

Wording: containerd's `failed to setup network for sandbox %q: %w` (pkg/cri/server/sandbox_run.go)
around libcni's `plugin type=%q failed (add): %w` (containernetworking/cni libcni/api.go
AddNetworkList), as seen in excerpts of the code index that name no repository or tag; the bridge
plugin's own errors come from Debian's real plugin.

Limits: the namespace is named after the pod's uid (containerd names it after a random id), and
the sandbox's random id is kept in /run/k8s-standin/sandboxes/<uid>, so a restarted kubelet finds
its pods' networks again; both go with a reboot, as containerd's do. The pod's pause container
(runtime.py) joins the namespace after this, where containerd makes the namespace, runs CNI and then
starts the container the same way. No portMappings or bandwidth capabilities are passed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess

from .containerd import cni_network, containerd_config
from .util import hp, run, write_file

NETNS_DIR = "/var/run/netns"
SANDBOX_DIR = "/run/k8s-standin/sandboxes"  # pod uid -> its sandbox's id
UID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class NetError(Exception):
    pass


def sandbox_id(uid: str) -> str | None:
    try:
        with open(hp(f"{SANDBOX_DIR}/{uid}"), encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def netns_name(uid: str) -> str:
    return f"cni-{uid}"


def plugin_conf(net: dict, plugin: dict, prev: dict | None) -> bytes:
    """libcni's buildOneConfig: the plugin's own keys, with the list's name and version, and the
    previous plugin's result."""
    conf = dict(plugin, name=net.get("name", ""), cniVersion=net.get("cniVersion", ""))
    if prev is not None:
        conf["prevResult"] = prev
    return json.dumps(conf).encode()


def _exec(bin_dir: str, plugin: dict, env: dict[str, str], body: bytes) -> dict:
    path = os.path.join(hp(bin_dir), str(plugin.get("type", "")))
    if not os.access(path, os.X_OK):
        raise NetError(f'failed to find plugin "{plugin.get("type")}" in path [{bin_dir}]')
    p = subprocess.run(
        [path], input=body, capture_output=True, env={**os.environ, **env}, timeout=60, check=False
    )
    try:
        out = json.loads(p.stdout or b"{}")
    except ValueError:
        out = {"msg": p.stdout.decode(errors="replace").strip()}
    if p.returncode != 0:
        raise NetError(
            str(out.get("msg") or p.stderr.decode(errors="replace").strip() or f"exit status {p.returncode}")
        )
    return out


# go-cni's WithLoNetwork, which containerd's CRI always sets: the loopback plugin brings `lo` up
# before the node's network (its JSON as here; go-cni attaches networks in order), as seen in
# excerpts of the code index that name no tag
LOOPBACK = {"cniVersion": "0.3.1", "name": "cni-loopback", "plugins": [{"type": "loopback"}]}


def _run_list(pod: dict, command: str, netns: str, sid: str, lo: bool = False) -> dict | None:
    cfg = containerd_config()
    net = LOOPBACK if lo else cni_network(cfg["conf_dir"])
    if net is None:
        raise NetError("cni plugin not initialized")
    meta = pod["metadata"]
    env = {
        "CNI_COMMAND": command, "CNI_CONTAINERID": sid, "CNI_NETNS": netns, "CNI_IFNAME": "lo" if lo else "eth0",
        "CNI_PATH": hp(cfg["bin_dir"]),
        "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={meta['namespace']};K8S_POD_NAME={meta['name']};"
                    f"K8S_POD_INFRA_CONTAINER_ID={sid};K8S_POD_UID={meta['uid']}",
    }  # fmt: skip
    plugins = net["plugins"] if command == "ADD" else list(reversed(net["plugins"]))
    result = None
    for plugin in plugins:
        try:
            out = _exec(
                cfg["bin_dir"], plugin, env, plugin_conf(net, plugin, result if command == "ADD" else None)
            )
        except NetError as e:
            verb = "add" if command == "ADD" else "delete"
            raise NetError(f'plugin type="{plugin.get("type")}" failed ({verb}): {e}') from None
        if command == "ADD":
            result = out
    return result


def pod_ip(result: dict | None) -> str | None:
    for ip in (result or {}).get("ips") or []:
        addr = str(ip.get("address", "")).split("/")[0]
        if addr:
            return addr
    return None


def _ns_ip(name: str) -> str | None:
    rc, out = run(["ip", "-n", name, "-j", "-4", "addr", "show", "dev", "eth0"], timeout=10)
    if rc != 0:
        return None
    try:
        return next((a["local"] for i in json.loads(out) for a in i.get("addr_info") or []), None)
    except (ValueError, KeyError, TypeError):
        return None


def setup(pod: dict) -> str:
    """The pod's IP: its namespace's, when an earlier call (or kubelet) set it up, else a new one."""
    uid = pod["metadata"]["uid"]
    name = netns_name(uid)
    if os.path.exists(hp(f"{NETNS_DIR}/{name}")) and sandbox_id(uid):
        ip = _ns_ip(name)
        if ip:
            return ip
    teardown(pod)  # what a failed or interrupted try left
    sid = secrets.token_hex(32)  # containerd's sandbox ids: 64 random hex digits
    os.makedirs(hp(SANDBOX_DIR), exist_ok=True)
    write_file(hp(f"{SANDBOX_DIR}/{uid}"), sid + "\n", 0o600)
    rc, out = run(["ip", "netns", "add", name], timeout=10)
    if rc != 0:
        raise NetError(f'failed to create network namespace for sandbox "{sid}": {out.strip()}')
    try:
        _run_list(pod, "ADD", f"{NETNS_DIR}/{name}", sid, lo=True)
        ip = pod_ip(_run_list(pod, "ADD", f"{NETNS_DIR}/{name}", sid))
        if not ip:
            raise NetError("the CNI result has no IP address")
    except NetError as e:
        teardown(pod)
        raise NetError(f'failed to setup network for sandbox "{sid}": {e}') from None
    return ip


def teardown(pod: dict) -> str | None:
    """DEL through the plugins, then the namespace goes; the error, if the plugins failed."""
    uid = pod["metadata"]["uid"]
    name, sid, err = netns_name(uid), sandbox_id(uid), None
    if sid:
        try:
            _run_list(pod, "DEL", f"{NETNS_DIR}/{name}", sid)
        except NetError as e:
            err = str(e)
    if os.path.exists(hp(f"{NETNS_DIR}/{name}")):
        run(["ip", "netns", "delete", name], timeout=10)
    if err is None:
        with contextlib.suppress(OSError):
            os.remove(hp(f"{SANDBOX_DIR}/{uid}"))
    return err


def leftover_uids() -> set[str]:
    """The pod uids this kubelet made a sandbox network for (its record, or a cni-<uid> namespace)."""
    found = set()
    for d, prefix in ((SANDBOX_DIR, ""), (NETNS_DIR, "cni-")):
        with contextlib.suppress(OSError):
            found |= {n[len(prefix) :] for n in os.listdir(hp(d)) if n.startswith(prefix)}
    return {u for u in found if UID_RE.fullmatch(u)}


def teardown_all() -> None:
    """kubeadm reset's "Removing kubernetes-managed containers": every pod's network goes."""
    for uid in leftover_uids():
        teardown({"metadata": {"uid": uid, "namespace": "", "name": ""}, "spec": {}})
