"""kubeadm join: discovery (JWS, CA pin), TLS bootstrap through the kubelet."""

from __future__ import annotations

import base64
import contextlib
import hmac
import os
import sys
import time
from typing import Any, TextIO

import yaml

from .apiserver import res_path
from .client import ApiClient, ApiError, Credentials, Unreachable, kubeconfig, load_kubeconfig
from .config import (
    DNS1123,
    DNS1123_MSG,
    classify_documents,
    detect_cri_socket,
    field_invalid,
    split_documents,
    validate_cri_socket,
)
from .files import K8S, KUBELET_CONFIG_CM, KUBELET_DIR, PKI, kubeadm_flags_env
from .flags import parse_flags
from .kubeadm import kubelet_check_messages, kubelet_healthy, phase, wait_for
from .pki import TOKEN_RE, ca_cert_hash, jws_detached
from .preflight import JOIN, Ctx, parse_ignore, root_check, run_checks, select
from .util import (
    DEFAULT_IMAGE_REPOSITORY,
    DISCOVERY_RETRY,
    Fail,
    hostname,
    hp,
    now,
    parse_duration,
    read_text,
    systemctl,
    write_file,
)

JOIN_FLAGS = {
    "token": "str", "discovery-token": "str", "tls-bootstrap-token": "str", "discovery-token-ca-cert-hash": "list",
    "discovery-token-unsafe-skip-ca-verification": "bool", "discovery-file": "str", "node-name": "str",
    "cri-socket": "str", "ignore-preflight-errors": "list", "config": "str", "control-plane": "bool",
    "apiserver-advertise-address": "str", "apiserver-bind-port": "str", "certificate-key": "str",
    "skip-phases": "list", "dry-run": "bool", "v": "str", "patches": "str",
}  # fmt: skip


def validate_pins(pins: list[str]) -> None:
    """pubkeypin.Set.Allow."""
    for p in pins:
        parts = p.split(":")
        if len(parts) != 2:
            raise Fail('invalid discovery token CA certificate hash: invalid hash, expected "format:hex-value". '
                       "Known format(s) are: sha256")  # fmt: skip
        fmt, val = parts
        if fmt.lower() != "sha256":
            raise Fail(
                f'invalid discovery token CA certificate hash: unknown hash format "{fmt}". Known format(s) are: sha256'
            )
        if len(val) // 2 != 32:
            raise Fail(f'invalid discovery token CA certificate hash: invalid hash "{p}", expected a 32 byte SHA-256 '
                       f"hash, found {len(val) // 2} bytes")  # fmt: skip
        try:
            bytes.fromhex(val)
        except ValueError as e:
            raise Fail(
                f'invalid discovery token CA certificate hash: invalid hash "{p}", could not decode SHA-256 from hex'
            ) from e


def discover(endpoint: str, token: str, pins: list[str], timeout: float, interval: float = DISCOVERY_RETRY
             ) -> tuple[str, str]:  # fmt: skip
    """kubeadm discovery/token: returns (cluster-info kubeconfig text, CA PEM)."""
    tid, tsec = token.split(".")
    validate_pins(pins)
    path = res_path("", "v1", "configmaps", "kube-public", "cluster-info")
    server = f"https://{endpoint}"

    def fetch(client: ApiClient) -> dict:
        end = now() + timeout
        while True:  # getClusterInfo: retry until the JWS for this token shows up or the timeout
            try:
                cm = client.get(path)
                if f"jws-kubeconfig-{tid}" in (cm.get("data") or {}):
                    return cm
                err = f'could not find a JWS signature in the cluster-info ConfigMap for token ID "{tid}"'
            except Unreachable as e:
                err = f'Get "{server}{path}?timeout=10s": {e.reason}'
            except ApiError as e:
                err = e.message
            if now() + interval > end:
                raise Fail(err)
            time.sleep(interval)

    cm = fetch(ApiClient(Credentials(server), timeout=10, verify=False))
    data = cm["data"]
    kc = data.get("kubeconfig", "")
    if not kc:
        raise Fail("there is no kubeconfig key in the cluster-info ConfigMap. This API Server isn't set up for token "
                   "bootstrapping, can't connect")  # fmt: skip
    if not hmac.compare_digest(jws_detached(kc, tid, tsec), data[f"jws-kubeconfig-{tid}"]):
        raise Fail(
            "failed to verify JWS signature of received cluster info object, can't trust this API Server"
        )
    doc = yaml.safe_load(kc)
    ca = base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
    if pins:
        h = ca_cert_hash(ca)
        if h[7:] not in {p.split(":")[1].lower() for p in pins}:
            raise Fail(
                f'cluster CA found in cluster-info ConfigMap is invalid: none of the public keys "{h}" are pinned'
            )
        if fetch(ApiClient(Credentials(server, ca_pem=ca), timeout=10))["data"].get("kubeconfig") != kc:
            raise Fail(
                "failed to securely validate the cluster-info ConfigMap: the kubeconfig does not match"
            )
    return kc, ca


def _join_preflight(
    state: dict[str, Any],
    endpoint: str,
    token: str,
    pins: list[str],
    timeout: float,
    node: str,
    cri: str,
    ignore: set[str],
    out: TextIO,
) -> None:
    def preflight() -> None:
        out.write("[preflight] Running pre-flight checks\n")
        out.flush()
        root_check(ignore)
        run_checks(select(JOIN, Ctx(node=node, cri=cri)), ignore)
        try:
            state["kc"], state["ca"] = discover(endpoint, token, pins, timeout)
        except Fail as e:
            raise Fail(f"couldn't validate the identity of the API Server: {e.message}") from e
        out.write("[preflight] Reading configuration from the cluster...\n")
        out.write(
            "[preflight] FYI: You can look at this config file with 'kubectl -n kube-system get cm kubeadm-config -o yaml'\n"
        )
        out.flush()
        boot = ApiClient(Credentials(f"https://{endpoint}", ca_pem=state["ca"], token=token))
        try:
            kcm = boot.get(res_path("", "v1", "configmaps", "kube-system", KUBELET_CONFIG_CM))
            ccm = boot.get(res_path("", "v1", "configmaps", "kube-system", "kubeadm-config"))
        except (ApiError, Unreachable) as e:
            raise Fail(
                f"unable to fetch the kubeadm-config ConfigMap: failed to get config map: {getattr(e, 'message', None) or e}"
            ) from e
        state["kubelet_cfg"] = kcm["data"]["kubelet"]
        state["cluster_cfg"] = yaml.safe_load(ccm["data"]["ClusterConfiguration"]) or {}
        state["boot"] = boot

    phase("preflight", preflight)


def _join_kubelet_start(
    state: dict[str, Any], endpoint: str, token: str, node: str, cri: str, nr: dict, out: TextIO
) -> None:
    def kubelet_start() -> None:
        boot: ApiClient = state["boot"]
        write_file(hp(f"{PKI}/ca.crt"), state["ca"])
        write_file(hp(f"{K8S}/bootstrap-kubelet.conf"),
                   kubeconfig(f"https://{endpoint}", state["ca"], "tls-bootstrap-token-user", {"token": token}), 0o600)  # fmt: skip
        with contextlib.suppress(ApiError):
            n = boot.get(res_path("", "v1", "nodes", name=node))
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in n.get("status", {}).get("conditions", [])
            ):
                raise Fail(f'a Node with name "{node}" and status "Ready" already exists in the cluster. You must '
                           "delete the existing Node or change the name of this new joining Node")  # fmt: skip
        out.write(f'[kubelet-start] Writing kubelet configuration to file "{KUBELET_DIR}/config.yaml"\n')
        write_file(hp(f"{KUBELET_DIR}/config.yaml"), state["kubelet_cfg"])
        out.write(
            f'[kubelet-start] Writing kubelet environment file with flags to file "{KUBELET_DIR}/kubeadm-flags.env"\n'
        )
        repo = state["cluster_cfg"].get("imageRepository", DEFAULT_IMAGE_REPOSITORY)
        write_file(
            hp(f"{KUBELET_DIR}/kubeadm-flags.env"),
            kubeadm_flags_env(cri, repo, node, nr.get("kubeletExtraArgs") or {}),
        )
        out.write("[kubelet-start] Starting the kubelet\n")
        rc, msg = systemctl("restart", "kubelet")
        if rc:
            out.write(f"[kubelet-start] WARNING: unable to start the kubelet service: [{msg.strip()}]\n"
                      "[kubelet-start] Please ensure kubelet is reloaded and running manually.\n")  # fmt: skip
        out.write("[kubelet-start] Waiting for the kubelet to perform the TLS Bootstrap...\n")
        out.flush()
        start, warned = now(), False
        while not os.path.exists(hp(f"{K8S}/kubelet.conf")):  # the kubelet writes it after its CSR is signed
            if not warned and now() - start > 40:
                warned = True
                out.write("[kubelet-check] Initial timeout of 40s passed.\n")
                if not kubelet_healthy():
                    kubelet_check_messages(out)
                out.flush()
            if now() - start > 300:
                raise Fail("timed out waiting for the condition")
            time.sleep(0.5)
        with contextlib.suppress(OSError):
            os.remove(hp(f"{K8S}/bootstrap-kubelet.conf"))
        client = ApiClient(Credentials.from_kubeconfig(load_kubeconfig(hp(f"{K8S}/kubelet.conf"))))
        path = res_path("", "v1", "nodes", name=node)

        def annotate() -> bool:
            n = client.get(path)
            n["metadata"].setdefault("annotations", {})["kubeadm.alpha.kubernetes.io/cri-socket"] = cri
            client.call("PUT", path, n)
            return True

        if not wait_for(annotate, 120, 1):
            raise Fail("error uploading crisocket: timed out waiting for the condition")

    phase("kubelet-start", kubelet_start)


def cmd_kubeadm_join(argv: list[str]) -> int:
    flags, pos = parse_flags(argv, JOIN_FLAGS)
    out = sys.stdout
    jc: dict = {}
    if flags.get("config"):
        text = read_text(flags["config"])
        if text is None:
            raise Fail(
                f'unable to read config from "{flags["config"]}" : open {flags["config"]}: no such file or directory'
            )
        jc = classify_documents(split_documents(text), ("JoinConfiguration",)).get("JoinConfiguration") or {}
    if flags.get("control-plane") or jc.get("controlPlane"):
        raise Fail(
            "standin: joining additional control-plane nodes is not supported (see tests/standin/README.md)"
        )
    disc = jc.get("discovery") or {}
    bt = disc.get("bootstrapToken") or {}
    endpoint = pos[0] if pos else bt.get("apiServerEndpoint", "")
    token = flags.get("discovery-token") or flags.get("token") or bt.get("token", "")
    pins = flags.get("discovery-token-ca-cert-hash") or bt.get("caCertHashes") or []
    unsafe = flags.get("discovery-token-unsafe-skip-ca-verification") or bt.get(
        "unsafeSkipCAVerification", False
    )
    nr = jc.get("nodeRegistration") or {}
    node = flags.get("node-name") or nr.get("name") or hostname()
    cri = flags.get("cri-socket") or nr.get("criSocket") or detect_cri_socket()
    timeout = parse_duration(str(disc.get("timeout", "5m0s")))
    if not endpoint and not flags.get("discovery-file"):
        raise Fail('discovery: Invalid value: "": bootstrapToken or file must be set')
    errs = []
    if not pins and not unsafe:
        errs.append(field_invalid("discovery.bootstrapToken", "", "using token-based discovery without caCertHashes "
                    "can be unsafe. Set unsafeSkipCAVerification as true in your kubeadm config file or pass "
                    "--discovery-token-unsafe-skip-ca-verification flag to continue"))  # fmt: skip
    if not TOKEN_RE.match(token):
        errs.append(field_invalid("discovery.bootstrapToken.token", token, "the bootstrap token is invalid"))
    if not DNS1123.match(node):
        errs.append(field_invalid("nodeRegistration.name", node, DNS1123_MSG))
    errs += validate_cri_socket(cri, "nodeRegistration.criSocket")
    if errs:
        raise Fail(errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]")
    ignore = parse_ignore(flags.get("ignore-preflight-errors", []), nr.get("ignorePreflightErrors"))
    state: dict[str, Any] = {}

    _join_preflight(state, endpoint, token, pins, timeout, node, cri, ignore, out)

    _join_kubelet_start(state, endpoint, token, node, cri, nr, out)
    out.write(JOIN_SUCCESS)
    return 0


JOIN_SUCCESS = """
This node has joined the cluster:
* Certificate signing request was sent to apiserver and a response was received.
* The Kubelet was informed of the new secure connection details.

Run 'kubectl get nodes' on the control-plane to see this node join the cluster.

"""
