"""kubeadm token, reset, upgrade, config, and the kubeadm command dispatch."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from typing import TextIO

import yaml

from . import etcdpod, podnet, runtime
from .apiserver import res_path, version_info
from .client import ApiClient, ApiError, Unreachable
from .config import InitConfig, control_plane_images, load_init_config, parse_version
from .containerd import image_exists, pull_image
from .files import (
    ETCD_MANIFEST,
    K8S,
    KUBELET_CONFIG_CM,
    KUBELET_DIR,
    MANIFESTS,
    PKI,
    etcd_data_dir,
    legacy_kubelet_config_cm,
)
from .flags import parse_flags
from .join import cmd_kubeadm_join
from .kubeadm import admin_client, cmd_kubeadm_init, dump
from .kubelet import apiserver_main
from .pki import TOKEN_RE, join_command, new_token, secret_data, token_secret_object
from .preflight import PULL, Ctx, parse_ignore, root_check, run_checks, select
from .util import (
    APISERVER_UNIT,
    DEFAULT_CRI_SOCKET,
    DOCKERSHIM_REMOVED,
    MIN_CONTROL_PLANE,
    STACK_HINT,
    VERSION,
    Fail,
    format_duration,
    hostname,
    hp,
    human_duration,
    log_klog,
    now,
    parse_duration,
    parse_rfc3339,
    read_text,
    systemctl,
    tabwrite,
    write_file,
)


def cmd_kubeadm_token(argv: list[str]) -> int:
    spec = {"print-join-command": "bool", "ttl": "str", "kubeconfig": "str", "description": "str", "groups": "str",
            "usages": "str", "config": "str", "v": "str", "dry-run": "bool", "certificate-key": "str", "output": "str"}  # fmt: skip
    flags, pos = parse_flags(argv, spec, {"o": "output"})
    kc = flags.get("kubeconfig", f"{K8S}/admin.conf")
    sub = pos[0] if pos else ""
    if sub == "generate":
        print(new_token())
        return 0
    if sub not in ("create", "list", "delete"):
        raise Fail(f'unknown command "{sub}" for "kubeadm token"')
    client = admin_client(kc)
    try:
        if sub == "create":
            token = pos[1] if len(pos) > 1 else new_token()
            if not TOKEN_RE.match(token):
                raise Fail(
                    f'the bootstrap token "{token}" was not of the form "\\\\A([a-z0-9]{{6}})\\\\.([a-z0-9]{{16}})\\\\z"'
                )
            try:
                ttl = parse_duration(flags.get("ttl", "24h0m0s"))
            except ValueError as e:
                raise Fail(f'invalid argument "{flags.get("ttl")}" for "--ttl" flag: {e}') from e
            sec = token_secret_object(token, ttl, flags.get("description", ""), flags.get("groups", ""))
            try:
                client.call("POST", res_path("", "v1", "secrets", "kube-system"), sec)
            except Unreachable as e:
                raise Fail(f"failed to create or update bootstrap token with name {sec['metadata']['name']}: unable to "
                           f'create Secret: Post "{client.creds.server}/api/v1/namespaces/kube-system/secrets?timeout=10s": '
                           f"{e.reason}") from e  # fmt: skip
            print(
                join_command(client.hostport, token, client.creds.ca_pem or "", True)
                if flags.get("print-join-command")
                else token
            )
            return 0
        if sub == "list":
            rows = [["TOKEN", "TTL", "EXPIRES", "USAGES", "DESCRIPTION", "EXTRA GROUPS"]]
            for sec in client.get(res_path("", "v1", "secrets", "kube-system"))["items"]:
                if sec.get("type") != "bootstrap.kubernetes.io/token":
                    continue
                d = secret_data(sec)
                exp = d.get("expiration", "")
                ttl_s = human_duration(parse_rfc3339(exp) - now()) if exp else "<forever>"
                usages = ",".join(
                    k[len("usage-bootstrap-") :] for k in sorted(d) if k.startswith("usage-bootstrap-")
                )
                rows.append([f"{d['token-id']}.{d['token-secret']}", ttl_s, exp or "<never>", usages,
                             d.get("description", "<none>"), d.get("auth-extra-groups", "")])  # fmt: skip
            sys.stdout.write(tabwrite(rows) if len(rows) > 1 else "")
            return 0
        for t in pos[1:]:
            tid = t.split(".")[0]
            try:
                client.call("DELETE", res_path("", "v1", "secrets", "kube-system", f"bootstrap-token-{tid}"))
            except ApiError as e:
                raise Fail(f'failed to delete bootstrap token "{tid}": {e.message}') from e
            print(f'bootstrap token "{tid}" deleted')
        return 0
    except Unreachable as e:
        raise Fail(f'failed to list bootstrap tokens: Get "{client.creds.server}/api/v1/namespaces/kube-system/secrets'
                   f'?fieldSelector=type%3Dbootstrap.kubernetes.io%2Ftoken": {e.reason}') from e  # fmt: skip


def cmd_kubeadm_reset(argv: list[str]) -> int:
    spec = {"force": "bool", "ignore-preflight-errors": "list", "cri-socket": "str", "v": "str", "kubeconfig": "str",
            "cert-dir": "str", "skip-phases": "list", "dry-run": "bool"}  # fmt: skip
    flags, _ = parse_flags(argv, spec, {"f": "force"})
    out = sys.stdout
    is_cp = os.path.exists(hp(f"{MANIFESTS}/kube-apiserver.yaml"))
    if is_cp:
        out.write("[reset] Reading configuration from the cluster...\n")
        out.write(
            "[reset] FYI: You can look at this config file with 'kubectl -n kube-system get cm kubeadm-config -o yaml'\n"
        )
    else:
        log_klog("W", "reset.go:101", "[reset] Unable to fetch the kubeadm-config ConfigMap from cluster: failed to get "
                 'config map: Get "https://:6443/api/v1/namespaces/kube-system/configmaps/kubeadm-config?timeout=10s": '
                 "dial tcp :6443: connect: connection refused")  # fmt: skip
    if not flags.get("force"):
        out.write(
            "[reset] WARNING: Changes made to this host by 'kubeadm init' or 'kubeadm join' will be reverted.\n"
        )
        out.write("[reset] Are you sure you want to proceed? [y/N]: ")
        out.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            raise Fail("aborted reset operation")
    ignore = parse_ignore(flags.get("ignore-preflight-errors", []))
    out.write("[preflight] Running pre-flight checks\n")
    root_check(ignore)
    if is_cp:
        out.write(f'[reset] Removing info for node "{hostname()}" from the ConfigMap "kubeadm-config" in the '
                  '"kube-system" Namespace\n')  # fmt: skip
    out.write("[reset] Stopping the kubelet service\n")
    systemctl("stop", "kubelet")
    out.write(f'[reset] Unmounting mounted directories in "{KUBELET_DIR}"\n')
    out.write("[reset] Removing kubernetes-managed containers\n")
    if os.path.exists(hp(f"/etc/systemd/system/{APISERVER_UNIT}")):  # the "static pod" containers
        systemctl("stop", APISERVER_UNIT)  # etcd's container with it (etcdpod.py)
        os.remove(hp(f"/etc/systemd/system/{APISERVER_UNIT}"))
        systemctl("daemon-reload")
        etcdpod.remove_leftover()
    # kubeadm removes the pods' sandboxes (runtime.py); containerd's StopPodSandbox runs CNI DEL
    runtime.remove_all(flags.get("cri-socket") or etcdpod.ENDPOINT)
    podnet.teardown_all()
    if not is_cp:
        out.write("[reset] No etcd config found. Assuming external etcd\n"
                  "[reset] Please, manually reset etcd to prevent further issues\n")  # fmt: skip
    dirs = [MANIFESTS, PKI]
    out.write(f"[reset] Deleting contents of config directories: [{' '.join(dirs)}]\n")
    files = [f"{K8S}/{n}" for n in ("admin.conf", "kubelet.conf", "bootstrap-kubelet.conf", "controller-manager.conf",
                                     "scheduler.conf")]  # fmt: skip
    out.write(f"[reset] Deleting files: [{' '.join(files)}]\n")
    # 1.23's getEtcdDataDir: the data volume's hostPath in etcd's manifest (a restored one included)
    etcd_dir = "/var/lib/etcd"
    with contextlib.suppress(Fail):
        if os.path.exists(hp(ETCD_MANIFEST)):
            etcd_dir = etcd_data_dir()
    stateful = [etcd_dir, KUBELET_DIR, "/var/lib/dockershim", "/var/run/kubernetes", "/var/lib/cni"]
    out.write(f"[reset] Deleting contents of stateful directories: [{' '.join(stateful)}]\n")
    for d in dirs + stateful:
        p = hp(d)
        if not os.path.isdir(p):
            continue
        for n in os.listdir(p):
            q = os.path.join(p, n)
            if os.path.isdir(q) and not os.path.islink(q):
                shutil.rmtree(q, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(q)
    for f in files:
        with contextlib.suppress(OSError):
            os.remove(hp(f))
    out.write(RESET_TAIL)
    return 0


RESET_TAIL = """
The reset process does not clean CNI configuration. To do so, you must remove /etc/cni/net.d

The reset process does not reset or clean up iptables rules or IPVS tables.
If you wish to reset iptables, you must do so manually by using the "iptables" command.

If your cluster was setup to utilize IPVS, run ipvsadm --clear (or similar)
to reset your system's IPVS tables.

The reset process does not clean your kubeconfig files and you must remove them manually.
Please, check the contents of the $HOME/.kube/config file.
"""


def version_policy(cluster: str, target: str, force: bool) -> list[str]:
    """upgrade.EnforceVersionPolicies (1.23, 1.24): one minor at a time, not at or below the
    minimum control plane (1.22.0 for kubeadm 1.23, 1.23.0 for 1.24), never a minor above kubeadm's,
    and without --force neither a patch above kubeadm nor a minor below it."""
    cv, tv, kv = parse_version(cluster), parse_version(target), parse_version(VERSION)
    if cv is None or kv is None or tv is None:
        raise Fail(f'[upgrade/version] FATAL: couldn\'t parse version "{target}"')
    mandatory, skippable = [], []
    if tv <= MIN_CONTROL_PLANE:  # the real message names the cluster's version, not the minimum
        mandatory.append(f'Specified version to upgrade to "{target}" is equal to or lower than the minimum supported '
                         f'version "{cluster}". Please specify a higher version to upgrade to')  # fmt: skip
    if tv[:2] > (cv[0], cv[1] + 1):
        mandatory.append(f'Specified version to upgrade to "{target}" is too high; kubeadm can upgrade only 1 minor '
                         "version at a time")  # fmt: skip
    if tv[:2] < (cv[0], cv[1] - 1):
        mandatory.append(f'Specified version to downgrade to "{target}" is too low; kubeadm can downgrade only 1 minor '
                         "version at a time")  # fmt: skip
    if tv > kv and tv[1] > kv[1]:
        mandatory.append(f'Specified version to upgrade to "{target}" is at least one minor release higher than the '
                         f"kubeadm minor release ({tv[1]} > {kv[1]}). Such an upgrade is not supported")  # fmt: skip
    elif tv > kv:
        skippable.append(f'Specified version to upgrade to "{target}" is higher than the kubeadm version "{VERSION}". '
                         "Upgrade kubeadm first using the tool you used to install kubeadm")  # fmt: skip
    if kv[:2] > tv[:2]:
        skippable.append(
            f"Kubeadm version {VERSION} can only be used to upgrade to Kubernetes version {kv[0]}.{kv[1]}"
        )
    if mandatory:
        raise Fail("[upgrade/version] FATAL: the --version argument is invalid due to these fatal errors:\n\n"
                   + "".join(f"\t- {m}\n" for m in mandatory)
                   + "\nPlease fix the misalignments highlighted above and try upgrading again")  # fmt: skip
    if skippable and not force:
        raise Fail("[upgrade/version] FATAL: the --version argument is invalid due to these errors:\n\n"
                   + "".join(f"\t- {m}\n" for m in skippable) + "\nCan be bypassed if you pass the --force flag")  # fmt: skip
    return skippable


def _kubelet_config_cm(client: ApiClient, cluster: str) -> dict:
    """The kubelet ConfigMap as kubeadm reads it: this kubeadm's name first, then the legacy
    kubelet-config-X.Y of the cluster's version (UnversionedKubeletConfigMap's fallback)."""
    names = dict.fromkeys((KUBELET_CONFIG_CM, legacy_kubelet_config_cm(cluster)))
    for i, name in enumerate(names):
        try:
            return client.get(res_path("", "v1", "configmaps", "kube-system", name))
        except ApiError as e:
            if i == len(names) - 1:
                raise Fail(f"[upgrade/config] FATAL: failed to get config map: {e.message}") from e
    raise AssertionError("unreachable")


def _upgrade_node(client: ApiClient, cluster: str, out: TextIO) -> int:
    if not os.path.exists(hp(f"{MANIFESTS}/kube-apiserver.yaml")):
        out.write(
            "[preflight] Running pre-flight checks\n[preflight] Skipping prepull. Not a control plane node.\n"
        )
        out.write("[upgrade] Skipping phase. Not a control plane node.\n")
    kcm = _kubelet_config_cm(client, cluster)
    write_file(hp(f"{KUBELET_DIR}/config.yaml"), kcm["data"]["kubelet"])
    out.write(f'[kubelet-start] Writing kubelet configuration to file "{KUBELET_DIR}/config.yaml"\n')
    out.write("[upgrade] The configuration for this node was successfully updated!\n")
    out.write(
        "[upgrade] Now you should go ahead and upgrade the kubelet package using your package manager.\n"
    )
    return 0


def _upgrade_plan(client: ApiClient, cur: str, out: TextIO) -> int:
    out.write("[upgrade] Fetching available versions to upgrade to\n")
    out.write(f"[upgrade/versions] Cluster version: {cur}\n[upgrade/versions] kubeadm version: {VERSION}\n")
    out.write(f"[upgrade/versions] Target version: {VERSION}\n")
    cv = parse_version(cur)
    if cv is None or cv >= (parse_version(VERSION) or cv):
        out.write("\nAwesome, you're up-to-date! Enjoy!\n")
        return 0
    rows = [["COMPONENT", "CURRENT", "TARGET"]]
    for n in client.get(res_path("", "v1", "nodes"))["items"]:
        rows.append(
            [
                "kubelet",
                f"1 x {(n.get('status') or {}).get('nodeInfo', {}).get('kubeletVersion', '')}",
                VERSION,
            ]
        )
    out.write("\nComponents that must be upgraded manually after you have upgraded the control plane with "
              "'kubeadm upgrade apply':\n" + tabwrite(rows))  # fmt: skip
    out.write(
        f"\nYou can now apply the upgrade by executing the following command:\n\n\tkubeadm upgrade apply {VERSION}\n\n"
    )
    return 0


def cmd_kubeadm_upgrade(argv: list[str]) -> int:
    spec = {"yes": "bool", "force": "bool", "config": "str", "kubeconfig": "str", "v": "str",
            "ignore-preflight-errors": "list", "certificate-renewal": "bool", "dry-run": "bool", "etcd-upgrade": "bool",
            "allow-experimental-upgrades": "bool", "allow-release-candidate-upgrades": "bool", "skip-phases": "list"}  # fmt: skip
    flags, pos = parse_flags(argv, spec, {"y": "yes", "f": "force"})
    sub = pos[0] if pos else ""
    out = sys.stdout
    if sub not in ("plan", "apply", "node"):
        raise Fail(f'unknown command "{sub}" for "kubeadm upgrade"')
    kc = flags.get("kubeconfig", f"{K8S}/kubelet.conf" if sub == "node" else f"{K8S}/admin.conf")
    if sub != "node":
        out.write("[upgrade/config] Making sure the configuration is correct:\n")
        out.write("[upgrade/config] Reading configuration from the cluster...\n")
    else:
        out.write("[upgrade] Reading configuration from the cluster...\n")
    out.write(
        "[upgrade/config] FYI: You can look at this config file with 'kubectl -n kube-system get cm kubeadm-config -o yaml'\n"
    )
    client = admin_client(kc)
    try:
        cm = client.get(res_path("", "v1", "configmaps", "kube-system", "kubeadm-config"))
    except (Unreachable, ApiError) as e:
        reason = e.reason if isinstance(e, Unreachable) else e.message
        raise Fail(f'[upgrade/config] FATAL: failed to get config map: Get "{client.creds.server}/api/v1/namespaces/'
                   f'kube-system/configmaps/kubeadm-config?timeout=10s": {reason}') from e  # fmt: skip
    ccfg = yaml.safe_load(cm["data"]["ClusterConfiguration"])
    cur = ccfg["kubernetesVersion"]
    if sub == "node":
        return _upgrade_node(client, cur, out)
    out.write("[preflight] Running pre-flight checks.\n[upgrade] Running cluster health checks\n")
    if sub == "plan":
        return _upgrade_plan(client, cur, out)
    if len(pos) < 2:
        raise Fail("[upgrade/version] FATAL: missing version argument; use `kubeadm upgrade apply <version>`")
    return _upgrade_apply(client, cm, ccfg, "v" + pos[1].lstrip("v"), flags, out)


def _upgrade_prepull(client: ApiClient, ccfg: dict, target: str, ignore: set[str], out: TextIO) -> None:
    """1.23 apply.go: preflight.RunPullImagesCheck on the target's control-plane images (what
    `kubeadm config images list` gives for that version and the cluster's imageRepository), through
    this node's CRI socket (its kubeadm.alpha.kubernetes.io/cri-socket annotation)."""
    out.write("[upgrade/prepull] Pulling images required for setting up a Kubernetes cluster\n"
              "[upgrade/prepull] This might take a minute or two, depending on the speed of your internet connection\n"
              "[upgrade/prepull] You can also perform this action in beforehand using 'kubeadm config images pull'\n")  # fmt: skip
    out.flush()
    cri = DEFAULT_CRI_SOCKET
    with contextlib.suppress(Unreachable, ApiError, KeyError, TypeError):
        node = client.get(res_path("", "v1", "nodes", None, hostname()))
        cri = node["metadata"]["annotations"]["kubeadm.alpha.kubernetes.io/cri-socket"]
    cfg = InitConfig()
    cfg.cluster = dict(ccfg, kubernetesVersion=target)
    run_checks(select(PULL, Ctx(images=tuple(control_plane_images(cfg)), cri=cri)), ignore)


def _upgrade_kube_proxy(client: ApiClient, target: str, out: TextIO) -> None:
    """The kube-proxy addon at the target's tag (its DaemonSet pods pull it on every node)."""
    path = res_path("apps", "v1", "daemonsets", "kube-system", "kube-proxy")
    try:
        ds = client.get(path)
    except ApiError:
        return  # skipped at init (addon/kube-proxy): kubeadm leaves it out on upgrade too
    for c in ds["spec"]["template"]["spec"].get("containers") or []:
        c["image"] = re.sub(r":v[^:/]+$", f":{target}", c["image"])
    ds["metadata"].pop("resourceVersion", None)
    client.call("PUT", path, ds)
    out.write("[addons] Applied essential addon: kube-proxy\n")


def _upgrade_apply(client: ApiClient, cm: dict, ccfg: dict, target: str, flags: dict, out: TextIO) -> int:
    cur = ccfg["kubernetesVersion"]
    out.write(f'[upgrade/version] You have chosen to change the cluster version to "{target}"\n')
    out.write(f"[upgrade/versions] Cluster version: {cur}\n[upgrade/versions] kubeadm version: {VERSION}\n")
    soft = version_policy(cur, target, bool(flags.get("force")))
    # read with the cluster's config, before any change
    kubelet_data = _kubelet_config_cm(client, cur)["data"]
    if soft:
        out.write(f"[upgrade/version] Found {len(soft)} potential version compatibility errors but skipping since the "
                  "--force flag is set: \n\n" + "".join(f"\t- {m}\n" for m in soft))  # fmt: skip
    if not (flags.get("yes") or flags.get("force")):
        out.write("[upgrade/confirm] Are you sure you want to proceed with the upgrade? [y/N]: ")
        out.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            raise Fail("won't proceed; the user didn't answer (Y|y) in order to continue")
    if flags.get("dry-run"):  # the stand-in's dry run stops here: nothing is written
        out.write("[upgrade/prepull] Would pull the required images (like 'kubeadm config images pull')\n"
                  "[dryrun] Finished dryrunning successfully!\n")  # fmt: skip
        return 0
    _upgrade_prepull(client, ccfg, target, parse_ignore(flags.get("ignore-preflight-errors") or []), out)
    ccfg["kubernetesVersion"] = target
    cm["data"]["ClusterConfiguration"] = dump(ccfg)
    client.call("PUT", res_path("", "v1", "configmaps", "kube-system", "kubeadm-config"), cm)
    for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        p = hp(f"{MANIFESTS}/{n}.yaml")
        old = read_text(p) or ""
        doc = yaml.safe_load(old or "{}") or {}
        for c in (doc.get("spec") or {}).get("containers") or []:
            c["image"] = re.sub(r":v[^:/]+$", f":{target}", c["image"])
        if doc:
            write_file(p, dump(doc), 0o600)
        if n == "kube-apiserver":  # the one component the stand-in runs: kubeadm waits for it
            _wait_restarted_apiserver(client, target, p, old, out)
        out.write(f'[upgrade/staticpods] Component "{n}" upgraded successfully!\n')
    _upload_kubelet_config(client, kubelet_data, out)
    _upgrade_kube_proxy(client, target, out)
    if DOCKERSHIM_REMOVED:
        _migrate_control_plane_marks(client, out)
    out.write(f'\n[upgrade/successful] SUCCESS! Your cluster was upgraded to "{target}". Enjoy!\n\n'
              "[upgrade/kubelet] Now that your control plane is upgraded, please proceed with upgrading your kubelets "
              "if you haven't already done so.\n")  # fmt: skip
    return 0


def _upload_kubelet_config(client: ApiClient, data: dict, out: TextIO) -> None:
    """Apply's upload-config: the cluster's KubeletConfiguration under this kubeadm's ConfigMap
    name (1.24: `kubelet-config`, the legacy kubelet-config-1.23 left as it was)."""
    out.write(f'[kubelet] Creating a ConfigMap "{KUBELET_CONFIG_CM}" in namespace kube-system with the '
              "configuration for the kubelets in the cluster\n")  # fmt: skip
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
           "metadata": {"name": KUBELET_CONFIG_CM, "namespace": "kube-system"}}  # fmt: skip
    try:
        client.call("POST", res_path("", "v1", "configmaps", "kube-system"), obj)
    except ApiError:  # already there: updated, as kubeadm's CreateOrUpdate
        client.call("PUT", res_path("", "v1", "configmaps", "kube-system", KUBELET_CONFIG_CM), obj)


MASTER_MARK = "node-role.kubernetes.io/master"
CONTROL_PLANE_MARK = "node-role.kubernetes.io/control-plane"


def _migrate_control_plane_marks(client: ApiClient, out: TextIO) -> None:
    """kubeadm 1.24's upgrade apply (KEP-2067 stage 2, kubernetes#107533 and #109840): the "master"
    label goes from the nodes that have it; control-plane nodes that carry the "master" taint also
    get the "control-plane" one (one without it, untainted by hand, is left untainted)."""
    out.write(f"[upgrade/postupgrade] Removing the deprecated label {MASTER_MARK}='' from all control plane Nodes. "
              f"After this step only the label {CONTROL_PLANE_MARK}='' will be present on control plane Nodes.\n"
              f"[upgrade/postupgrade] Adding the new taint &Taint{{Key:{CONTROL_PLANE_MARK},Value:,Effect:NoSchedule,"
              "TimeAdded:<nil>,} to all control plane Nodes.\n")  # fmt: skip
    for n in client.get(res_path("", "v1", "nodes"))["items"]:
        labels, spec = n["metadata"].get("labels") or {}, n.setdefault("spec", {})
        taints = spec.get("taints") or []
        keys = {(t.get("key"), t.get("effect")) for t in taints}
        add_taint = CONTROL_PLANE_MARK in labels and (MASTER_MARK, "NoSchedule") in keys
        add_taint = add_taint and (CONTROL_PLANE_MARK, "NoSchedule") not in keys
        if MASTER_MARK not in labels and not add_taint:
            continue
        labels.pop(MASTER_MARK, None)
        if add_taint:
            spec["taints"] = [*taints, {"key": CONTROL_PLANE_MARK, "effect": "NoSchedule"}]
        n["metadata"].pop("resourceVersion", None)
        client.call("PUT", res_path("", "v1", "nodes", None, n["metadata"]["name"]), n)


UPGRADE_MANIFEST_TIMEOUT = 300.0  # kubeadm 1.23: UpgradeManifestTimeout, 5m0s


def _wait_restarted_apiserver(client: ApiClient, target: str, path: str, old: str, out: TextIO) -> None:
    """As kubeadm's static pod upgrade: wait for the kubelet to restart the API server at the
    target version (its /version follows the manifest's image); on timeout put the old manifest
    back and fail with kubeadm's words."""
    out.write("[upgrade/staticpods] Waiting for the kubelet to restart the component\n"
              f"[upgrade/staticpods] This might take a minute or longer depending on the component/version gap "
              f"(timeout {format_duration(UPGRADE_MANIFEST_TIMEOUT)})\n")  # fmt: skip
    out.flush()
    start = now()
    while now() - start < UPGRADE_MANIFEST_TIMEOUT:
        try:
            code, body = client.raw("GET", "/version")
            if code == 200 and json.loads(body).get("gitVersion") == target:
                out.write("[apiclient] Found 1 Pods for label selector component=kube-apiserver\n")
                return
        except (Unreachable, ValueError):
            pass
        time.sleep(1)
    if old:
        write_file(path, old, 0o600)
    raise Fail("[upgrade/apply] FATAL: couldn't upgrade control plane. kubeadm has tried to recover everything into "
               "the earlier state. Errors faced: timed out waiting for the condition")  # fmt: skip


def cmd_kubeadm_config(argv: list[str]) -> int:
    spec = {"config": "str", "kubernetes-version": "str", "image-repository": "str", "v": "str", "kubeconfig": "str",
            "cri-socket": "str", "feature-gates": "str", "output": "str", "allow-missing-template-keys": "bool",
            "show-managed-fields": "bool", "experimental-output": "str"}  # fmt: skip
    flags, pos = parse_flags(argv, spec, {"o": "output"})
    if pos[:2] in (["images", "list"], ["images", "pull"]):
        mixed = sorted(k for k in ("image-repository", "kubernetes-version") if flags.get(k))
        if flags.get("config") and mixed:
            raise Fail(f"can not mix '--config' with arguments [{' '.join(mixed)}]")
        cfg = load_init_config(flags.get("config"), flags, resolve_host=False)
        imgs = control_plane_images(cfg)
        if pos[1] == "list":
            fmt = flags.get("output") or flags.get("experimental-output") or "text"
            doc = {"kind": "Images", "apiVersion": "output.kubeadm.k8s.io/v1alpha1", "images": imgs}
            if fmt == "json":
                print(json.dumps(doc, indent=4))
            elif fmt == "yaml":
                sys.stdout.write(dump(doc))
            else:
                print("\n".join(imgs))
            return 0
        for img in imgs:
            rc, out = (0, "") if image_exists(cfg.cri_socket, img) else pull_image(cfg.cri_socket, img)
            if rc:
                raise Fail(f'failed to pull image "{img}": output: {out}, error: exit status 1')
            print(f"[config/images] Pulled {img}")
        return 0
    raise Fail(f'unknown command "{" ".join(pos)}" for "kubeadm config"')


def cmd_kubeadm(argv: list[str]) -> int:
    if not argv:
        print("kubeadm: easily bootstrap a secure Kubernetes cluster (TEST-ONLY stand-in)")
        return 0
    sub, rest = argv[0], argv[1:]
    if sub == "__standin-apiserver":
        return apiserver_main(rest)
    if sub == "version":
        flags, _ = parse_flags(rest, {"output": "str", "v": "str"}, {"o": "output"})
        fmt = flags.get("output", "")
        info = version_info()
        if fmt == "short":
            print(VERSION)
        elif fmt == "json":
            print(json.dumps({"clientVersion": info}, indent=2))
        elif fmt == "yaml":
            sys.stdout.write(dump({"clientVersion": info}))
        elif fmt == "":
            print(
                "kubeadm version: &version.Info{"
                + ", ".join(f'{k[0].upper() + k[1:]}:"{v}"' for k, v in info.items())
                + "}"
            )
        else:
            raise Fail(f"invalid output format: {fmt}")
        return 0
    table: dict[str, Callable[[list[str]], int]] = {
        "init": cmd_kubeadm_init, "join": cmd_kubeadm_join, "token": cmd_kubeadm_token, "reset": cmd_kubeadm_reset,
        "upgrade": cmd_kubeadm_upgrade, "config": cmd_kubeadm_config,
    }  # fmt: skip
    if sub not in table:
        raise Fail(f'unknown command "{sub}" for "kubeadm"')
    return table[sub](rest)


# --------------------------------------------------------------------------- entry point


def kubeadm_main(argv: list[str]) -> int:
    try:
        return cmd_kubeadm(argv)
    except Fail as e:
        sys.stdout.flush()
        sys.stderr.write(f"{e.message}\n{STACK_HINT}\n")
        return e.code
