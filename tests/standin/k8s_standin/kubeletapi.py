"""The kubelet's own API on :10250, the part `kubectl logs` reaches through the API server.

Kubelet side: GET /containerLogs/NS/POD/CONTAINER (kubelet pkg/kubelet/server/server.go), over
TLS with the serving certificate the kubelet makes itself when none is configured
(`<cert-dir>/kubelet.crt`), for a client certificate from the CA of
authentication.x509.clientCAFile (the API server's apiserver-kubelet-client).

API server side: GET pods/NAME/log picks the container and the node as LogLocation does
(pkg/registry/core/pod/strategy.go, read in a copy that names no tag; its wording is kept) and
asks that node's kubelet (its InternalIP, at the port of status.daemonEndpoints) with
--kubelet-client-certificate, not verifying the kubelet's own certificate, as kubeadm sets no
--kubelet-certificate-authority.

Not as real: any client certificate from that CA is allowed (a kubelet asks the API server with a
SubjectAccessReview), no other kubelet path is served, only tailLines is passed on, and the log is
the file's lines as ctr wrote them (runtime.log_path), not CRI lines with their timestamps
stripped."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import os
import re
import ssl
import threading
import urllib.parse
from typing import Any

from .client import ApiError
from .pki import self_signed
from .util import hp, now

PORT = 10250
CONTAINER_LOGS = re.compile(r"/containerLogs/([a-z0-9.-]+)/([a-z0-9.-]+)/([a-z0-9-]+)")


def _tail(value: str) -> int | None:
    """tailLines' value, when it is a number."""
    return int(value) if re.fullmatch(r"-?\d{1,9}", value) else None


# ---- the kubelet's side
def serving_cert(cert_dir: str, host: str) -> tuple[str, str]:
    """`<cert-dir>/kubelet.crt` and `.key`, self-signed for HOST, made on first start."""
    crt, key = os.path.join(cert_dir, "kubelet.crt"), os.path.join(cert_dir, "kubelet.key")
    if not (os.path.exists(crt) and os.path.exists(key)):
        os.makedirs(cert_dir, mode=0o755, exist_ok=True)
        self_signed(crt, key, f"{host}@{int(now())}", host)
    return crt, key


def container_log(ns: str, pod: str, container: str, tail: int | None) -> tuple[int, bytes]:
    """The newest attempt's log of CONTAINER in NS/POD, its last TAIL lines."""
    base = hp("/var/log/pods")
    dirs = [d for d in os.listdir(base) if d.startswith(f"{ns}_{pod}_")] if os.path.isdir(base) else []
    logs = []
    for d in dirs:
        cdir = os.path.join(base, d, container)
        for f in os.listdir(cdir) if os.path.isdir(cdir) else []:
            if f.removesuffix(".log").isdigit():
                logs.append((int(f.removesuffix(".log")), os.path.join(cdir, f)))
    if not logs:
        return 404, f'container "{container}" in pod "{pod}" is not available\n'.encode()
    with open(max(logs)[1], "rb") as fh:
        lines = fh.read().splitlines(keepends=True)
    return 200, b"".join(lines[-tail:] if tail is not None and tail > 0 else [] if tail == 0 else lines)


def serve(
    cert: str, key: str, client_ca: str, bind: str = "0.0.0.0", port: int = PORT
) -> http.server.ThreadingHTTPServer:
    """Serve the kubelet's API in a background thread: 401 without a client certificate."""

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            m = CONTAINER_LOGS.fullmatch(url.path)
            authed = False
            with contextlib.suppress(AttributeError, ValueError):
                authed = bool(self.connection.getpeercert())  # type: ignore[attr-defined]
            if not authed:
                code, body = 401, b"Unauthorized"
            elif m is None:
                code, body = 404, b"404 page not found\n"
            else:
                code, body = container_log(
                    *m.groups(), _tail(urllib.parse.parse_qs(url.query).get("tailLines", [""])[0])
                )
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class S(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def finish_request(self, request: Any, client_address: Any) -> None:
            try:  # the handshake in the worker thread
                request = ctx.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return
            super().finish_request(request, client_address)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    if os.path.exists(client_ca):
        ctx.load_verify_locations(client_ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL  # a certificate is verified when presented; none: 401
    srv = S((bind, port), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


# ---- the API server's side
def log_container(pod: dict, name: str, container: str) -> str:
    """LogLocation's choice of container: the one asked for, or the pod's only one."""
    names = [c["name"] for c in pod["spec"].get("containers") or []]
    inits = [c["name"] for c in pod["spec"].get("initContainers") or []]
    if container and container not in names + inits:
        raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
    if container or len(names) == 1:
        return container or names[0]
    msg = f"a container name must be specified for pod {name}"
    if names:
        msg += f", choose one of: [{' '.join(names)}]"
        msg += f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
    raise ApiError(400, "BadRequest", msg)


def fetch_log(pod: dict, node: dict | None, query: dict[str, str], client: tuple[str, str] | None) -> str:
    """GET pods/NAME/log: the log from the pod's node's kubelet ("" for a pod on no node, as the
    empty location streams nothing)."""
    meta = pod["metadata"]
    container = log_container(pod, meta["name"], query.get("container", ""))
    if node is None:
        return ""
    status = node.get("status") or {}
    address = next((a["address"] for a in status.get("addresses") or [] if a.get("type") == "InternalIP"),
                   node["metadata"]["name"])  # fmt: skip
    port = int(((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or PORT)
    tail = _tail(query.get("tailLines", ""))
    url = f"/containerLogs/{meta['namespace']}/{meta['name']}/{container}"
    url += f"?tailLines={tail}" if tail is not None else ""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    if client:
        ctx.load_cert_chain(*client)
    conn = http.client.HTTPSConnection(address, port, context=ctx, timeout=30)
    try:
        conn.request("GET", url)
        resp = conn.getresponse()
        body = resp.read().decode(errors="replace")
    except OSError as e:
        why = getattr(e, "strerror", None) or str(e)
        raise ApiError(
            500, "InternalError", f'Get "https://{address}:{PORT}{url}": dial tcp {address}:{PORT}: {why}'
        ) from e
    finally:
        conn.close()
    if resp.status != 200:
        code, reason = (resp.status, "BadRequest") if resp.status < 500 else (500, "InternalError")
        raise ApiError(code, reason, body.strip() or resp.reason)
    return body
