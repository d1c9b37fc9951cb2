#!/usr/bin/python3
"""TEST-ONLY stand-in for kubeadm / kubelet / kubectl / crictl v1.23.17.

One multi-call file: the lab bundle copies it to /usr/bin/{kubeadm,kubelet,kubectl,crictl}
and it dispatches on basename(argv[0]).  It checks the real node (swap, sysctls, ports,
containerd socket, tools), keeps real state (certificates, kubeconfigs, a JSON-backed API
server over mutual TLS) and fails with the real tools' wording and exit codes.
Limits: see tests/standin/README.md.  NEVER ship this in a production bundle.
Needs only python3 (3.11+, as on Debian 12) stdlib, python3-yaml, the openssl CLI and containerd's ctr.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime as dt
import hashlib
import hmac
import http.client
import http.server
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

import yaml

VERSION = "v1.23.17"
GIT_COMMIT = "953be8927218ec8067e1af2641e540238ffd7576"
BUILD_DATE = "2023-02-22T13:33:14Z"
GO_VERSION = "go1.19.6"
CRICTL_VERSION = "v1.23.0"
PAUSE_VERSION = "3.6"
ETCD_VERSION = "3.5.6-0"
COREDNS_VERSION = "v1.8.6"
# kubeadm v1.23.17 carries the registry.k8s.io backport.
DEFAULT_IMAGE_REPOSITORY = "registry.k8s.io"
MIN_CONTROL_PLANE = (1, 22, 0)
DEFAULT_CRI_SOCKET = "unix:///run/containerd/containerd.sock"
KNOWN_CRI_SOCKETS = {
    "/var/run/docker.sock": "/var/run/dockershim.sock",
    "/run/containerd/containerd.sock": "unix:///run/containerd/containerd.sock",
    "/var/run/crio/crio.sock": "unix:///var/run/crio/crio.sock",
}
APISERVER_UNIT = "kube-apiserver-standin.service"
# Taints the node lifecycle controller owns (derived from conditions on every read).
CONTROLLER_TAINTS = {
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/unschedulable",
}
NODE_MONITOR_GRACE = 40.0  # kube-controller-manager --node-monitor-grace-period default
DISCOVERY_RETRY = 5.0
TOOLS_MANDATORY = ("conntrack", "ip", "iptables", "mount", "nsenter")
TOOLS_OPTIONAL = ("ebtables", "ethtool", "socat", "tc", "touch")
STACK_HINT = "To see the stack trace of this error execute with --v=5 or higher"

# TEST-ONLY: unit tests point this at a fake tree (proc/sys, proc/swaps, etc/kubernetes ...).
ROOT = os.environ.get("STANDIN_ROOT", "")


def hp(path: str) -> str:
    """Host path, relocated under STANDIN_ROOT for unit tests only."""
    return ROOT + path if ROOT else path


class Fail(Exception):
    """A user-visible failure: message already in the real tool's wording."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


# --------------------------------------------------------------------------- small utils


def now() -> float:
    return time.time()


def rfc3339(ts: float | None = None) -> str:
    t = dt.datetime.fromtimestamp(now() if ts is None else ts, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


_DUR = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DUR_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(s: str) -> float:
    """Go time.ParseDuration (seconds)."""
    if s in ("0", ""):
        return 0.0
    pos, total = 0, 0.0
    for m in _DUR.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DUR_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or pos == 0:
        raise ValueError(f'time: invalid duration "{s}"')
    return total


def format_duration(seconds: float) -> str:
    """Go time.Duration.String for whole seconds."""
    s = round(seconds)
    if s == 0:
        return "0s"
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    if m:
        return f"{m}m{sec}s"
    return f"{sec}s"


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery duration.HumanDuration (the AGE column)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def tabwrite(rows: list[list[str]]) -> str:
    """text/tabwriter(minwidth 0, padding 3) as kubectl uses it; the last column is not padded."""
    if not rows:
        return ""
    ncol = max(len(r) for r in rows)
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(ncol)]
    out = []
    for r in rows:
        cells = [c.ljust(widths[i] + 3) if i < len(r) - 1 else c for i, c in enumerate(r)]
        out.append("".join(cells))
    return "\n".join(out) + "\n"


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def write_file(path: str, data: str | bytes, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def go_json(obj: Any) -> str:
    """encoding/json Marshal: compact, map keys sorted."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def log_klog(level: str, where: str, msg: str) -> None:
    t = dt.datetime.now()
    sys.stderr.write(f"{level}{t:%m%d %H:%M:%S.%f} {os.getpid():>7} {where}] {msg}\n")


def run(cmd: list[str], timeout: float = 30, inp: bytes | None = None) -> tuple[int, str]:
    """Run a command; (rc, combined output).  Missing binary -> 127 like a shell."""
    try:
        p = subprocess.run(
            cmd, input=inp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False
        )
    except FileNotFoundError:
        return 127, f'exec: "{cmd[0]}": executable file not found in $PATH'
    except subprocess.TimeoutExpired:
        return 124, f"{cmd[0]}: timed out after {timeout:g}s"
    return p.returncode, p.stdout.decode(errors="replace")


def systemctl(*args: str) -> tuple[int, str]:
    return run(["systemctl", *args], timeout=60)


def hostname() -> str:
    return socket.gethostname().lower()


# --------------------------------------------------------------------------- PKI (openssl CLI)


def _openssl(args: list[str], inp: bytes | None = None) -> str:
    rc, out = run(["openssl", *args], inp=inp)
    if rc != 0:
        raise Fail(f"openssl {' '.join(args[:2])} failed: {out.strip()}")
    return out


def gen_key(path: str, ec: bool = False) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if ec:  # the kubelet's own client keys are ECDSA P-256
        _openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path])
    else:  # kubeadm 1.23 uses RSA 2048
        _openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", path])
    os.chmod(path, 0o600)


def subj(cn: str, orgs: Iterable[str] = ()) -> str:
    return "".join(f"/O={o}" for o in orgs) + f"/CN={cn}"


def make_ca(cert: str, key: str, cn: str) -> None:
    gen_key(key)
    _openssl(
        ["req", "-x509", "-new", "-key", key, "-subj", subj(cn), "-days", "3650", "-out", cert,
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
         "-addext", f"subjectAltName=DNS:{cn}"]
    )  # fmt: skip


def sign_csr(
    csr_pem: str, ca_cert: str, ca_key: str, *, server: bool = False, client: bool = True,
    sans: Iterable[str] = (), days: int = 365,
) -> str:  # fmt: skip
    """Sign a CSR with the CA; returns the certificate PEM."""
    usages = [u for u, on in (("serverAuth", server), ("clientAuth", client)) if on]
    ext = "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    ext += f"extendedKeyUsage={','.join(usages)}\n"
    if sans:
        ext += "subjectAltName=" + ",".join(sans) + "\n"
    with tempfile.TemporaryDirectory() as td:
        csr, extf, out = (os.path.join(td, n) for n in ("c.csr", "ext", "c.crt"))
        write_file(csr, csr_pem)
        write_file(extf, ext)
        serial = str(int.from_bytes(secrets.token_bytes(8), "big"))
        _openssl(
            ["x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key, "-set_serial", serial,
             "-days", str(days), "-extfile", extf, "-out", out]
        )  # fmt: skip
        return read_text(out) or ""


def make_csr(key: str, cn: str, orgs: Iterable[str] = ()) -> str:
    return _openssl(["req", "-new", "-key", key, "-subj", subj(cn, orgs)])


def make_cert(
    cert: str, key: str, ca_cert: str, ca_key: str, cn: str, orgs: Iterable[str] = (), **kw: Any
) -> None:
    if not os.path.exists(key):
        gen_key(key)
    write_file(cert, sign_csr(make_csr(key, cn, orgs), ca_cert, ca_key, **kw))


def csr_subject(csr_pem: str) -> tuple[str, list[str]]:
    """(CN, [O...]) of a PEM CSR."""
    out = _openssl(["req", "-noout", "-subject", "-nameopt", "RFC2253"], inp=csr_pem.encode())
    cn, orgs = "", []
    for part in out.split("=", 1)[1].strip().split(","):
        k, _, v = part.partition("=")
        if k == "CN":
            cn = v
        elif k == "O":
            orgs.append(v)
    return cn, orgs


def _der_read(buf: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER element at pos."""
    tag = buf[pos]
    ln = buf[pos + 1]
    pos += 2
    if ln & 0x80:
        n = ln & 0x7F
        ln = int.from_bytes(buf[pos : pos + n], "big")
        pos += n
    return tag, pos, pos + ln


def pem_to_der(pem: str) -> bytes:
    body = re.search(r"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", pem, re.S)
    if not body:
        raise ValueError("no CERTIFICATE block found")
    return base64.b64decode("".join(body.group(1).split()))


def spki_der(cert_pem: str) -> bytes:
    """The DER SubjectPublicKeyInfo of the first certificate in cert_pem."""
    der = pem_to_der(cert_pem)
    _, cs, _ = _der_read(der, 0)  # Certificate
    _, pos, _ = _der_read(der, cs)  # tbsCertificate content
    if der[pos] == 0xA0:  # [0] version
        pos = _der_read(der, pos)[2]
    for _ in range(5):  # serial, signature alg, issuer, validity, subject
        pos = _der_read(der, pos)[2]
    _, _, end = _der_read(der, pos)
    return der[pos:end]


def ca_cert_hash(cert_pem: str) -> str:
    """kubeadm's pubkeypin.Hash: sha256 over the DER SubjectPublicKeyInfo."""
    return "sha256:" + hashlib.sha256(spki_der(cert_pem)).hexdigest()


# --------------------------------------------------------------------------- bootstrap tokens / JWS

TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
_TOKEN_CHARS = "0123456789abcdefghijklmnopqrstuvwxyz"


def new_token() -> str:
    pick = lambda n: "".join(secrets.choice(_TOKEN_CHARS) for _ in range(n))  # noqa: E731
    return f"{pick(6)}.{pick(16)}"


def jws_detached(content: str, token_id: str, token_secret: str) -> str:
    """bootstrap.ComputeDetachedSignature: HS256 JWS, payload stripped (header..sig)."""
    header = b64url(go_json({"alg": "HS256", "kid": token_id}).encode())
    signing_input = f"{header}.{b64url(content.encode())}"
    sig = hmac.new(token_secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{header}..{b64url(sig)}"


def token_secret_object(token: str, ttl: float, description: str = "", groups: str = "") -> dict:
    tid, tsec = token.split(".")
    data = {
        "token-id": tid,
        "token-secret": tsec,
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",
        "auth-extra-groups": groups or "system:bootstrappers:kubeadm:default-node-token",
    }
    if ttl > 0:
        data["expiration"] = rfc3339(now() + ttl)
    if description:
        data["description"] = description
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": f"bootstrap-token-{tid}", "namespace": "kube-system"},
        "data": {k: b64(v) for k, v in data.items()},
    }


def secret_data(obj: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}


def token_expired(sec: dict, at: float | None = None) -> bool:
    exp = secret_data(sec).get("expiration")
    return bool(exp) and parse_rfc3339(exp) <= (now() if at is None else at)


def join_command(endpoint: str, token: str, ca_pem: str, one_line: bool) -> str:
    """cmd/kubeadm/app/cmd/util/join.go template (trailing space included, like the real one)."""
    cmd = f"kubeadm join {endpoint} --token {token} \\\n\t--discovery-token-ca-cert-hash {ca_cert_hash(ca_pem)} "
    if one_line:  # `token create --print-join-command` strips the line continuation
        cmd = cmd.replace("\\\n", "").replace("\t", "")
    return cmd


# --------------------------------------------------------------------------- kubeconfig


def kubeconfig(server: str, ca_pem: str, user: str, cred: dict[str, str], cluster: str = "kubernetes") -> str:
    ctx = f"{user}@{cluster}"
    doc = {
        "apiVersion": "v1",
        "clusters": [
            {"cluster": {"certificate-authority-data": b64(ca_pem), "server": server}, "name": cluster}
        ],
        "contexts": [{"context": {"cluster": cluster, "user": user}, "name": ctx}],
        "current-context": ctx,
        "kind": "Config",
        "preferences": {},
        "users": [{"name": user, "user": cred}],
    }
    return yaml.safe_dump(doc, default_flow_style=False)


def cluster_info_kubeconfig(server: str, ca_pem: str) -> str:
    doc = {
        "apiVersion": "v1",
        "clusters": [{"cluster": {"certificate-authority-data": b64(ca_pem), "server": server}, "name": ""}],
        "contexts": None,
        "current-context": "",
        "kind": "Config",
        "preferences": {},
        "users": None,
    }
    return yaml.safe_dump(doc, default_flow_style=False)


def load_kubeconfig(path: str) -> dict:
    text = read_text(path)
    if text is None:
        raise Fail(f"error: stat {path}: no such file or directory")
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise Fail(f'error loading config file "{path}": yaml: {e}') from e
    if not isinstance(doc, dict):
        raise Fail(f'error loading config file "{path}": couldn\'t get version/kind; json parse error')
    doc["_dir"] = os.path.dirname(os.path.abspath(path))
    return doc


class Credentials:
    """Resolved connection data from a kubeconfig: server URL + TLS material + token."""

    def __init__(self, server: str, ca_pem: str | None = None, cert_pem: str | None = None,
                 key_pem: str | None = None, token: str | None = None, insecure: bool = False) -> None:  # fmt: skip
        self.server = server.rstrip("/")
        self.ca_pem = ca_pem
        self.cert_pem = cert_pem
        self.key_pem = key_pem
        self.token = token
        self.insecure = insecure

    @classmethod
    def from_kubeconfig(cls, doc: dict) -> Credentials:
        def pick(kind: str, name: str) -> dict:
            for item in doc.get(kind) or []:
                if item.get("name") == name:
                    return item.get(kind[:-1]) or {}
            return {}

        cur = doc.get("current-context") or ""
        ctx = pick("contexts", cur)
        if not cur or not ctx:
            if len(doc.get("clusters") or []) == 1 and not cur:
                ctx = {"cluster": doc["clusters"][0].get("name"), "user": ""}
            else:
                raise Fail(
                    "The connection to the server localhost:8080 was refused - did you specify the right host or port?"
                )
        cl, us = pick("clusters", ctx.get("cluster", "")), pick("users", ctx.get("user", ""))
        base = doc.get("_dir", "/")

        def material(d: dict, key: str) -> str | None:
            if d.get(f"{key}-data"):
                return base64.b64decode(d[f"{key}-data"]).decode()
            if d.get(key):
                p = hp(d[key]) if os.path.isabs(d[key]) else os.path.join(base, d[key])
                t = read_text(p)
                if t is None:
                    raise Fail(f"error: unable to read {key} {p} for {ctx.get('user')} due to open {p}: "
                               "no such file or directory")  # fmt: skip
                return t
            return None

        return cls(
            cl.get("server", ""),
            material(cl, "certificate-authority"),
            material(us, "client-certificate"),
            material(us, "client-key"),
            us.get("token"),
            bool(cl.get("insecure-skip-tls-verify")),
        )


# --------------------------------------------------------------------------- API client


class Unreachable(Exception):
    """The API server did not answer (connection refused, timeout, TLS failure)."""

    def __init__(self, hostport: str, reason: str, refused: bool) -> None:
        super().__init__(reason)
        self.hostport = hostport
        self.reason = reason
        self.refused = refused


class ApiError(Exception):
    """A metav1.Status failure from the API server."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> dict:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


def not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": resource})


class ApiClient:
    """Minimal Kubernetes REST client over (mutual) TLS with one keep-alive connection."""

    def __init__(self, creds: Credentials, timeout: float = 10.0, verify: bool = True) -> None:
        self.creds = creds
        u = urllib.parse.urlsplit(creds.server or "http://localhost:8080")
        self.scheme = u.scheme or "https"
        self.host = u.hostname or "localhost"
        self.port = u.port or (443 if self.scheme == "https" else 80)
        self.hostport = f"{self.host}:{self.port}"
        self.timeout = timeout
        self.verify = verify and not creds.insecure
        self.warnings: list[str] = []
        self._conn: http.client.HTTPConnection | None = None

    def _context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self.verify and self.creds.ca_pem:
            ctx.load_verify_locations(cadata=self.creds.ca_pem)
        elif self.verify:
            ctx.load_default_certs()
        else:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.creds.cert_pem and self.creds.key_pem:
            # ssl only loads client material from files: a private 0600 temp file, removed at once.
            fd, path = tempfile.mkstemp(prefix="standin-cred-")
            try:
                os.write(fd, (self.creds.cert_pem + "\n" + self.creds.key_pem).encode())
                os.close(fd)
                ctx.load_cert_chain(path)
            finally:
                os.unlink(path)
        return ctx

    def _connect(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self.scheme == "https":
                self._conn = http.client.HTTPSConnection(
                    self.host, self.port, timeout=self.timeout, context=self._context()
                )
            else:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def raw(
        self, method: str, path: str, body: Any = None, ctype: str = "application/json"
    ) -> tuple[int, bytes]:
        headers = {"Accept": "application/json", "User-Agent": f"standin/{VERSION}"}
        if self.creds.token:
            headers["Authorization"] = f"Bearer {self.creds.token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = ctype
        for attempt in (0, 1):
            conn = self._connect()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
                for w in resp.headers.get_all("Warning") or []:
                    self.warnings.append(w.split('"', 1)[-1].rstrip('"'))
                return resp.status, payload
            except ConnectionRefusedError as e:
                self.close()
                raise Unreachable(
                    self.hostport, f"dial tcp {self.hostport}: connect: connection refused", True
                ) from e
            except ssl.SSLCertVerificationError as e:
                self.close()
                msg = "x509: certificate signed by unknown authority"
                if "match" in str(e.verify_message or ""):
                    msg = f"x509: certificate is valid for other names, not {self.host}"
                raise Unreachable(self.hostport, msg, False) from e
            except ssl.SSLError as e:
                self.close()
                raise Unreachable(self.hostport, f"remote error: tls: {e.reason or e}".lower(), False) from e
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self.close()
                if attempt:
                    raise Unreachable(
                        self.hostport, f"read tcp {self.hostport}: connection reset by peer", False
                    ) from e
            except (TimeoutError, OSError) as e:
                self.close()
                reason = "i/o timeout" if isinstance(e, TimeoutError) else (e.strerror or str(e)).lower()
                raise Unreachable(self.hostport, f"dial tcp {self.hostport}: {reason}", False) from e
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, body: Any = None, ctype: str = "application/json") -> Any:
        code, payload = self.raw(method, path, body, ctype)
        try:
            doc = json.loads(payload) if payload else {}
        except ValueError:
            doc = payload.decode(errors="replace")
        if code >= 400:
            if isinstance(doc, dict) and doc.get("kind") == "Status":
                raise ApiError(code, doc.get("reason", ""), doc.get("message", ""), doc.get("details"))
            raise ApiError(code, "Unknown", str(doc).strip() or http.client.responses.get(code, ""))
        return doc

    def get(self, path: str) -> Any:
        return self.call("GET", path)


# --------------------------------------------------------------------------- API resources

# (group, version, kind, plural, namespaced, shortNames, deprecation warning)
BUILTIN_RESOURCES: list[tuple[str, str, str, str, bool, list[str], str]] = [
    ("", "v1", "Namespace", "namespaces", False, ["ns"], ""),
    ("", "v1", "Node", "nodes", False, ["no"], ""),
    ("", "v1", "ServiceAccount", "serviceaccounts", True, ["sa"], ""),
    ("", "v1", "ConfigMap", "configmaps", True, ["cm"], ""),
    ("", "v1", "Secret", "secrets", True, [], ""),
    ("", "v1", "Service", "services", True, ["svc"], ""),
    ("", "v1", "Pod", "pods", True, ["po"], ""),
    ("", "v1", "Endpoints", "endpoints", True, ["ep"], ""),
    ("", "v1", "Event", "events", True, ["ev"], ""),
    ("", "v1", "PersistentVolume", "persistentvolumes", False, ["pv"], ""),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ["pvc"], ""),
    ("", "v1", "LimitRange", "limitranges", True, ["limits"], ""),
    ("", "v1", "ResourceQuota", "resourcequotas", True, ["quota"], ""),
    ("apps", "v1", "Deployment", "deployments", True, ["deploy"], ""),
    ("apps", "v1", "DaemonSet", "daemonsets", True, ["ds"], ""),
    ("apps", "v1", "StatefulSet", "statefulsets", True, ["sts"], ""),
    ("apps", "v1", "ReplicaSet", "replicasets", True, ["rs"], ""),
    ("batch", "v1", "Job", "jobs", True, [], ""),
    ("batch", "v1", "CronJob", "cronjobs", True, ["cj"], ""),
    ("batch", "v1beta1", "CronJob", "cronjobs", True, ["cj"],
     "batch/v1beta1 CronJob is deprecated in v1.21+, unavailable in v1.25+; use batch/v1 CronJob"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False, [], ""),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False, [], ""),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", True, [], ""),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True, [], ""),
    ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, ["pdb"], ""),
    ("policy", "v1beta1", "PodDisruptionBudget", "poddisruptionbudgets", True, ["pdb"],
     "policy/v1beta1 PodDisruptionBudget is deprecated in v1.21+, unavailable in v1.25+; "
     "use policy/v1 PodDisruptionBudget"),
    ("policy", "v1beta1", "PodSecurityPolicy", "podsecuritypolicies", False, ["psp"],
     "policy/v1beta1 PodSecurityPolicy is deprecated in v1.21+, unavailable in v1.25+"),
    ("networking.k8s.io", "v1", "Ingress", "ingresses", True, ["ing"], ""),
    ("networking.k8s.io", "v1", "IngressClass", "ingressclasses", False, [], ""),
    ("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True, ["netpol"], ""),
    ("storage.k8s.io", "v1", "StorageClass", "storageclasses", False, ["sc"], ""),
    ("storage.k8s.io", "v1", "CSIDriver", "csidrivers", False, [], ""),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False,
     ["crd", "crds"], ""),
    ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration",
     "mutatingwebhookconfigurations", False, [], ""),
    ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
     "validatingwebhookconfigurations", False, [], ""),
    ("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ["pc"], ""),
    ("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False, [], ""),
    ("coordination.k8s.io", "v1", "Lease", "leases", True, [], ""),
    ("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests", False,
     ["csr"], ""),
    ("apiregistration.k8s.io", "v1", "APIService", "apiservices", False, [], ""),
]  # fmt: skip


def group_of(api_version: str) -> tuple[str, str]:
    return tuple(api_version.split("/", 1)) if "/" in api_version else ("", api_version)  # type: ignore[return-value]


def res_path(group: str, version: str, plural: str, ns: str | None = None, name: str | None = None) -> str:
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if ns:
        base += f"/namespaces/{ns}"
    base += f"/{plural}"
    return base + (f"/{urllib.parse.quote(name, safe='')}" if name else "")


def qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


# --------------------------------------------------------------------------- API server (stand-in)


class Store:
    """Cluster state (what etcd holds), persisted as one JSON file after every write."""

    def __init__(self, state_dir: str) -> None:
        self.path = os.path.join(state_dir, "state.json")
        self.lock = threading.RLock()
        self.rv = 1
        self.objects: dict[str, dict] = {}
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        text = read_text(self.path)
        if text:
            doc = json.loads(text)
            self.rv, self.objects = doc["resourceVersion"], doc["objects"]
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            key = self.key("", "namespaces", "", ns)
            if key not in self.objects:
                self.put(key, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    @staticmethod
    def key(group: str, plural: str, ns: str, name: str) -> str:
        return f"{group}|{plural}|{ns}|{name}"

    def put(self, key: str, obj: dict) -> dict:
        with self.lock:
            self.rv += 1
            md = obj.setdefault("metadata", {})
            md["resourceVersion"] = str(self.rv)
            md.setdefault("uid", str(_uuid4()))
            md.setdefault("creationTimestamp", rfc3339())
            if obj.get("kind") == "Namespace":
                obj.setdefault("spec", {"finalizers": ["kubernetes"]})
                obj["status"] = {"phase": "Active"}
                md.setdefault("labels", {})["kubernetes.io/metadata.name"] = md["name"]
            self.objects[key] = obj
            self.save()
            return obj

    def delete(self, key: str) -> dict | None:
        with self.lock:
            obj = self.objects.pop(key, None)
            if obj is not None:
                self.save()
            return obj

    def save(self) -> None:
        write_file(self.path, json.dumps({"resourceVersion": self.rv, "objects": self.objects}), 0o600)

    def items(self, group: str, plural: str, ns: str | None = None) -> list[dict]:
        pre = f"{group}|{plural}|"
        with self.lock:
            out = [
                copy.deepcopy(o)
                for k, o in sorted(self.objects.items())
                if k.startswith(pre) and (ns is None or k.split("|")[2] == ns)
            ]
        return out


def _uuid4() -> str:
    b = bytearray(secrets.token_bytes(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class ApiServer:
    """The stand-in kube-apiserver: REST subset + authn (x509 / bootstrap tokens) + node lifecycle."""

    def __init__(self, state_dir: str, ca_cert: str, ca_key: str) -> None:
        self.store = Store(state_dir)
        self.ca_cert = ca_cert
        self.ca_key = ca_key
        self.cluster_cidr = ""

    def next_pod_cidr(self) -> str:
        """kube-controller-manager --allocate-node-cidrs: the first free /24 of --cluster-cidr."""
        used = {n.get("spec", {}).get("podCIDR") for n in self.store.items("", "nodes")}
        net = ipaddress.ip_network(self.cluster_cidr.split(",")[0], strict=False)
        for sub in net.subnets(new_prefix=max(24, net.prefixlen)):
            if str(sub) not in used:
                return str(sub)
        raise ApiError(
            500, "InternalError", "CIDR allocation failed; there are no remaining CIDRs left to allocate"
        )

    # ---- discovery
    def resources(self) -> list[tuple[str, str, str, str, bool, list[str], str]]:
        out = list(BUILTIN_RESOURCES)
        for crd in self.store.items("apiextensions.k8s.io", "customresourcedefinitions"):
            spec = crd.get("spec") or {}
            names = spec.get("names") or {}
            for v in spec.get("versions") or []:
                if v.get("served", True):
                    out.append((spec.get("group", ""), v.get("name", ""), names.get("kind", ""),
                                names.get("plural", ""), spec.get("scope") == "Namespaced",
                                names.get("shortNames") or [], ""))  # fmt: skip
        return out

    def find(self, group: str, version: str, plural: str) -> tuple[str, str, str, str, bool, list[str], str]:
        for r in self.resources():
            if r[0] == group and r[1] == version and r[3] == plural:
                return r
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def discovery(self, parts: list[str]) -> dict | None:
        res = self.resources()
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if parts == ["apis"]:
            groups: dict[str, list[str]] = {}
            for r in res:
                if r[0] and r[1] not in groups.setdefault(r[0], []):
                    groups[r[0]].append(r[1])
            items = []
            for g, vs in groups.items():
                vers = [{"groupVersion": f"{g}/{v}", "version": v} for v in vs]
                items.append({"name": g, "versions": vers, "preferredVersion": vers[0]})
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": items}
        gv = None
        if len(parts) == 2 and parts[0] == "api":
            gv = ("", parts[1])
        elif len(parts) == 3 and parts[0] == "apis":
            gv = (parts[1], parts[2])
        if gv is None:
            return None
        lst = [
            {"name": r[3], "singularName": "", "namespaced": r[4], "kind": r[2], "shortNames": r[5],
             "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}
            for r in res if (r[0], r[1]) == gv
        ]  # fmt: skip
        if not lst:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{gv[0]}/{gv[1]}" if gv[0] else gv[1], "resources": lst}  # fmt: skip

    # ---- authentication / authorization
    def authenticate(self, peer: dict | None, authz: str | None) -> tuple[str, list[str]]:
        if authz:
            m = TOKEN_RE.match(authz.removeprefix("Bearer ").strip())
            if not m:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            sec = self.store.objects.get(
                Store.key("", "secrets", "kube-system", f"bootstrap-token-{m.group(1)}")
            )
            d = secret_data(sec) if sec else {}
            if (not sec or d.get("token-secret") != m.group(2) or token_expired(sec)
                    or d.get("usage-bootstrap-authentication") != "true"):  # fmt: skip
                raise ApiError(401, "Unauthorized", "Unauthorized")
            extra = [g for g in d.get("auth-extra-groups", "").split(",") if g]
            return f"system:bootstrap:{m.group(1)}", ["system:bootstrappers", *extra, "system:authenticated"]
        if peer:
            cn, orgs = "", []
            for rdn in peer.get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        cn = v
                    elif k == "organizationName":
                        orgs.append(v)
            return cn, [*orgs, "system:authenticated"]
        return "system:anonymous", ["system:unauthenticated"]

    @staticmethod
    def authorize(
        user: str, groups: list[str], verb: str, group: str, plural: str, ns: str, name: str
    ) -> bool:
        if "system:masters" in groups or user in ("system:kube-controller-manager", "system:kube-scheduler"):
            return True
        public_ci = (
            plural == "configmaps" and ns == "kube-public" and name == "cluster-info" and verb == "get"
        )
        if public_ci:  # kubeadm's RBAC: cluster-info is readable by anonymous
            return True
        joining = "system:bootstrappers" in groups or "system:nodes" in groups
        if joining and plural == "configmaps" and ns == "kube-system" and verb == "get":
            return name in ("kubeadm-config", f"kubelet-config-{VERSION[1:5]}", "kube-proxy")
        if joining and plural == "certificatesigningrequests" and verb in ("create", "get"):
            return True
        if "system:bootstrappers" in groups and plural == "nodes" and verb == "get":
            return True  # kubeadm:get-nodes
        if "system:nodes" in groups and plural == "nodes":
            own = user == f"system:node:{name}"
            return verb in ("get", "list", "watch") or (own and verb in ("create", "update", "patch"))
        return False

    # ---- node lifecycle controller, evaluated on read
    @staticmethod
    def lifecycle(node: dict) -> dict:
        st = node.setdefault("status", {})
        conds = st.get("conditions") or []
        hb = max(
            (parse_rfc3339(c["lastHeartbeatTime"]) for c in conds if c.get("lastHeartbeatTime")), default=0
        )
        if conds and now() - hb > NODE_MONITOR_GRACE:
            for c in conds:
                if c.get("status") != "Unknown":
                    c.update({"status": "Unknown", "reason": "NodeStatusUnknown",
                              "message": "Kubelet stopped posting node status.", "lastTransitionTime": rfc3339()})  # fmt: skip
        ready = next((c.get("status") for c in conds if c.get("type") == "Ready"), None)
        spec = node.setdefault("spec", {})
        taints = [t for t in spec.get("taints") or [] if t.get("key") not in CONTROLLER_TAINTS]
        if ready == "Unknown":
            taints += [
                {"key": "node.kubernetes.io/unreachable", "effect": e} for e in ("NoSchedule", "NoExecute")
            ]
        elif ready != "True":
            taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
        if spec.get("unschedulable"):
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        seen: set[tuple[str, str]] = set()
        spec["taints"] = [
            t for t in taints if (t["key"], t["effect"]) not in seen and not seen.add((t["key"], t["effect"]))
        ]
        if not spec["taints"]:
            del spec["taints"]
        return node

    def cluster_info(self, cm: dict) -> dict:
        """The bootstrap signer: one jws-kubeconfig-<id> per valid signing token."""
        data = cm.setdefault("data", {})
        for k in [k for k in data if k.startswith("jws-kubeconfig-")]:
            del data[k]
        for sec in self.store.items("", "secrets", "kube-system"):
            d = secret_data(sec)
            if sec.get("type") == "bootstrap.kubernetes.io/token" and d.get("usage-bootstrap-signing") == "true" \
                    and not token_expired(sec):  # fmt: skip
                data[f"jws-kubeconfig-{d['token-id']}"] = jws_detached(data.get("kubeconfig", ""), d["token-id"],
                                                                       d["token-secret"])  # fmt: skip
        return cm

    def purge_expired_tokens(self) -> None:
        """The token cleaner controller."""
        for sec in self.store.items("", "secrets", "kube-system"):
            if sec.get("type") == "bootstrap.kubernetes.io/token" and token_expired(sec):
                self.store.delete(Store.key("", "secrets", "kube-system", sec["metadata"]["name"]))

    def sign_node_csr(self, obj: dict, user: str, groups: list[str]) -> None:
        """csrapprover + csrsigner for kubelet client certificates."""
        pem = base64.b64decode(obj["spec"]["request"]).decode()
        cn, orgs = csr_subject(pem)
        if not cn.startswith("system:node:") or orgs != ["system:nodes"]:
            raise ApiError(
                403, "Forbidden", f"standin: only kubelet client CSRs are signed, got CN={cn} O={orgs}"
            )
        if "system:nodes" in groups and user != cn:
            raise ApiError(403, "Forbidden", f'{user} cannot request a certificate for "{cn}"')
        cert = sign_csr(pem, self.ca_cert, self.ca_key, client=True)
        obj["spec"].update({"username": user, "groups": groups})
        obj["status"] = {
            "certificate": b64(cert),
            "conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved",
                            "message": "Auto approving kubelet client certificate after SubjectAccessReview."}],
        }  # fmt: skip

    # ---- request handling
    def handle(self, method: str, path: str, query: dict[str, str], body: bytes, peer: dict | None,
               authz: str | None) -> tuple[int, Any, list[str]]:  # fmt: skip
        if path in ("/healthz", "/livez", "/readyz"):
            return 200, "ok", []
        if path == "/version":
            return 200, version_info(), []
        user, groups = self.authenticate(peer, authz)
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/") if p]
        disc = self.discovery(parts)
        if disc is not None:
            if user == "system:anonymous":
                raise ApiError(
                    403, "Forbidden", f'forbidden: User "system:anonymous" cannot get path "{path}"'
                )
            return 200, disc, []
        if parts[:1] == ["api"] and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        r = self.find(group, version, rest[0])
        plural, namespaced, warn = r[3], r[4], [r[6]] if r[6] else []
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if namespaced != bool(ns) and not (namespaced and not ns and method == "GET" and not name):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}.get(method, "")  # fmt: skip
        authz_name = name
        if method == "POST" and not name:  # creates are authorized on the name in the body
            with contextlib.suppress(ValueError, AttributeError):
                authz_name = (json.loads(body or b"{}").get("metadata") or {}).get("name", "")
        if not self.authorize(user, groups, verb, group, plural, ns, authz_name):
            if user == "system:anonymous":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
            what = f'resource "{plural}" in API group "{group}" {scope}'
            raise ApiError(
                403,
                "Forbidden",
                f'{qualified(plural, group)}{" " + repr(name).replace(chr(39), chr(34)) if name else ""} is forbidden: User "{user}" cannot {verb} {what}',
            )
        qn = qualified(plural, group)
        with self.store.lock:
            self.purge_expired_tokens()
            if method == "GET" and not name:
                items = self.store.items(group, plural, ns or None)
                if plural == "nodes":
                    items = [self.lifecycle(n) for n in items]
                sel = query.get("labelSelector", "")
                items = [
                    i for i in items if match_selector(sel, (i.get("metadata") or {}).get("labels") or {})
                ]
                kind = r[2] + "List"
                return 200, {"kind": kind, "apiVersion": f"{group}/{version}" if group else version,
                             "metadata": {"resourceVersion": str(self.store.rv)}, "items": items}, warn  # fmt: skip
            key = Store.key(group, plural, ns, name)
            cur = copy.deepcopy(self.store.objects.get(key))
            if method == "GET":
                if cur is None:
                    raise not_found(qn, name)
                if plural == "nodes":
                    cur = self.lifecycle(cur)
                if plural == "configmaps" and ns == "kube-public" and name == "cluster-info":
                    cur = self.cluster_info(cur)
                return 200, cur, warn
            if method == "DELETE":
                if cur is None:
                    raise not_found(qn, name)
                self.store.delete(key)
                if plural == "namespaces":
                    for k in [k for k in self.store.objects if k.split("|")[2] == name]:
                        self.store.delete(k)
                return 200, cur, warn
            try:
                obj = json.loads(body or b"{}")
            except ValueError as e:
                raise ApiError(400, "BadRequest", f"error decoding body: {e}") from e
            if method == "POST":
                name = (obj.get("metadata") or {}).get("name", "")
                if not name:
                    raise ApiError(
                        422,
                        "Invalid",
                        f'{r[2]} "" is invalid: metadata.name: Required value: name or generateName is required',
                    )
                if ns and Store.key("", "namespaces", "", ns) not in self.store.objects:
                    raise not_found("namespaces", ns)
                key = Store.key(group, plural, ns, name)
                if key in self.store.objects:
                    raise ApiError(409, "AlreadyExists", f'{qn} "{name}" already exists',
                                   {"name": name, "kind": plural})  # fmt: skip
                obj.setdefault("metadata", {})["name"] = name
                if ns:
                    obj["metadata"]["namespace"] = ns
                obj.setdefault("apiVersion", f"{group}/{version}" if group else version)
                obj.setdefault("kind", r[2])
                if plural == "certificatesigningrequests":
                    self.sign_node_csr(obj, user, groups)
                if plural == "nodes" and self.cluster_cidr and not obj.get("spec", {}).get("podCIDR"):
                    obj.setdefault("spec", {})["podCIDR"] = self.next_pod_cidr()
                    obj["spec"]["podCIDRs"] = [obj["spec"]["podCIDR"]]
                return 201, self.store.put(key, obj), warn
            if cur is None:
                raise not_found(qn, name)
            if method == "PUT":
                want_rv = (obj.get("metadata") or {}).get("resourceVersion")
                if want_rv and want_rv != cur["metadata"]["resourceVersion"]:
                    raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qn} "{name}": the object has '
                                   "been modified; please apply your changes to the latest version and try again")  # fmt: skip
                new = obj
                if sub == "status":
                    new = dict(cur, status=obj.get("status", {}))
                for f in ("uid", "creationTimestamp"):
                    new.setdefault("metadata", {})[f] = cur["metadata"][f]
            else:  # PATCH: JSON merge patch (strategic patches are treated the same way here)
                new = merge_patch(cur, obj)
            return 200, self.store.put(key, new), warn


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def match_selector(selector: str, labels: dict[str, str]) -> bool:
    """Equality/existence label selectors: k=v, k==v, k!=v, k, !k (comma = AND)."""
    for term in [t.strip() for t in selector.split(",") if t.strip()]:
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = re.split(r"==?", term, maxsplit=1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


def version_info() -> dict:
    return {
        "major": "1",
        "minor": VERSION.split(".")[1],
        "gitVersion": VERSION,
        "gitCommit": GIT_COMMIT,
        "gitTreeState": "clean",
        "buildDate": BUILD_DATE,
        "goVersion": GO_VERSION,
        "compiler": "gc",
        "platform": "linux/amd64",
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "standin-apiserver"
    api: ApiServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        peer = None
        with contextlib.suppress(AttributeError, ValueError):
            peer = self.connection.getpeercert() or None  # type: ignore[attr-defined]
        warn: list[str] = []
        try:
            code, doc, warn = self.api.handle(
                self.command, u.path, q, body, peer, self.headers.get("Authorization")
            )
        except ApiError as e:
            code, doc = e.code, e.status()
        except Fail as e:
            code, doc = 500, ApiError(500, "InternalError", e.message).status()
        payload = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(doc, str) else "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for w in warn:
            self.send_header("Warning", f'299 - "{w}"')
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class _TLSServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    ssl_ctx: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(60)
        if self.ssl_ctx is not None:  # handshake in the worker thread, not in accept()
            try:
                request = self.ssl_ctx.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return
        super().finish_request(request, client_address)


def serve_api(state_dir: str, cert: str, key: str, client_ca: str, ca_key: str, bind: str, port: int,
              cluster_cidr: str = "") -> tuple[_TLSServer, ApiServer]:  # fmt: skip
    """Start the API server in a background thread (used by the unit and by tests)."""
    api = ApiServer(state_dir, client_ca, ca_key)
    api.cluster_cidr = cluster_cidr
    handler = type("H", (_Handler,), {"api": api})
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    srv_cls = type("S", (_TLSServer,), {"address_family": family})
    srv = srv_cls((bind, port), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(client_ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL  # like --client-ca-file: certificates are verified when presented
    srv.ssl_ctx = ctx
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, api


# --------------------------------------------------------------------------- kubeadm configuration

KUBEADM_GROUP = "kubeadm.k8s.io"
KUBEADM_VERSIONS = ("v1beta2", "v1beta3")
OLD_KUBEADM_APIS = {
    "kubeadm.k8s.io/v1alpha1": "v1.11",
    "kubeadm.k8s.io/v1alpha2": "v1.12",
    "kubeadm.k8s.io/v1alpha3": "v1.14",
    "kubeadm.k8s.io/v1beta1": "v1.15",
}
KNOWN_FIELDS = {
    "InitConfiguration": {"bootstrapTokens", "nodeRegistration", "localAPIEndpoint", "certificateKey",
                          "skipPhases", "patches"},
    "ClusterConfiguration": {"etcd", "networking", "kubernetesVersion", "controlPlaneEndpoint", "apiServer",
                             "controllerManager", "scheduler", "dns", "certificatesDir", "imageRepository",
                             "featureGates", "clusterName", "useHyperKubeImage"},
    "JoinConfiguration": {"nodeRegistration", "caCertPath", "discovery", "controlPlane", "skipPhases", "patches"},
}  # fmt: skip
COMPONENT_GROUPS = {
    "kubelet.config.k8s.io": "KubeletConfiguration",
    "kubeproxy.config.k8s.io": "KubeProxyConfiguration",
}
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def field_invalid(path: str, value: Any, msg: str) -> str:
    return f"{path}: Invalid value: {json.dumps(value)}: {msg}"


def split_documents(text: str) -> list[dict]:
    """kubeadm's SplitYAMLDocuments + TypeMeta checks."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise Fail(f"error converting YAML to JSON: yaml: {line}{problem}") from e
    errs, kinds = [], set()
    for d in docs:
        if not isinstance(d, dict):
            raise Fail("error unmarshaling JSON: while decoding JSON: json: cannot unmarshal string into Go value "
                       "of type struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string "
                       "\"json:\\\"kind,omitempty\\\"\" }")  # fmt: skip
        if not d.get("apiVersion") or not d.get("kind"):
            errs.append(
                "invalid configuration: kind and apiVersion is mandatory information that needs to be specified"
            )
            continue
        if d["kind"] in kinds:
            errs.append(f'invalid configuration: kind "{d["kind"]}" is specified twice in YAML file')
            continue
        kinds.add(d["kind"])
    if errs:
        raise Fail("[" + ", ".join(errs) + "]" if len(errs) > 1 else errs[0])
    return docs


def classify_documents(docs: list[dict], wanted: tuple[str, ...]) -> dict[str, dict]:
    """documentMapTo*Configuration: version gate, strict-field warnings, ignored kinds."""
    found: dict[str, dict] = {}
    for d in docs:
        api, kind = d["apiVersion"], d["kind"]
        if api in OLD_KUBEADM_APIS:
            raise Fail(f'your configuration file uses an old API spec: "{api}". Please use kubeadm '
                       f"{OLD_KUBEADM_APIS[api]} instead and run 'kubeadm config migrate --old-config old.yaml "
                       "--new-config new.yaml', which will write the new, similar spec using a newer API version.")  # fmt: skip
        group, version = group_of(api)
        gvk = f'schema.GroupVersionKind{{Group:"{group}", Version:"{version}", Kind:"{kind}"}}'
        if group == KUBEADM_GROUP and version in KUBEADM_VERSIONS and kind in KNOWN_FIELDS:
            for f in sorted(set(d) - KNOWN_FIELDS[kind] - {"apiVersion", "kind"}):
                log_klog("W", "strict.go:55", f"error unmarshaling configuration {gvk}: error unmarshaling JSON: "
                         f'while decoding JSON: json: unknown field "{f}"')  # fmt: skip
            if kind in wanted:
                found[kind] = d
                continue
        elif COMPONENT_GROUPS.get(group) == kind and version in ("v1beta1", "v1alpha1"):
            found[kind] = d
            continue
        if group not in COMPONENT_GROUPS:
            log_klog("W", "utils.go:69", f"[config] WARNING: Ignored YAML document with GroupVersionKind "
                     f"{group}/{version}, Kind={kind}")  # fmt: skip
    return found


def parse_version(v: str) -> tuple[int, int, int] | None:
    m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?$", v or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def normalize_k8s_version(v: str) -> str:
    if v in ("", "stable", "stable-1", "latest", "stable-1.23"):
        if v:  # offline: real kubeadm falls back to its own version after failing to fetch the label
            log_klog("W", "version.go:104", f'could not fetch a Kubernetes version from the internet: unable to get '
                     f'URL "https://dl.k8s.io/release/{v}.txt": Get "https://dl.k8s.io/release/{v}.txt": dial tcp: '
                     "lookup dl.k8s.io: Temporary failure in name resolution")  # fmt: skip
            log_klog("W", "version.go:105", f"falling back to the local client version: {VERSION}")
        return VERSION
    pv = parse_version(v)
    if pv is None:
        raise Fail(
            f'version "{v}" doesn\'t match patterns for neither semantic version nor labels (stable, latest, ...)'
        )
    norm = "v" + v.lstrip("v")
    if pv < MIN_CONTROL_PLANE:
        raise Fail("this version of kubeadm only supports deploying clusters with the control plane version >= "
                   f"{'.'.join(map(str, MIN_CONTROL_PLANE))}. Current version: {norm}")  # fmt: skip
    return norm


def default_advertise_address() -> str:
    """ChooseHostInterface: the IPv4 address of the default-route interface."""
    for line in (read_text("/proc/net/route") or "").splitlines()[1:]:
        f = line.split()
        if len(f) > 2 and f[1] == "00000000":
            rc, out = run(["ip", "-4", "-o", "addr", "show", "dev", f[0]])
            m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", out) if rc == 0 else None
            if m:
                return m.group(1)
    raise Fail("unable to select an IP from default routes.")


def detect_cri_socket() -> str:
    found = [sock for path, sock in KNOWN_CRI_SOCKETS.items() if os.path.exists(hp(path))]
    if len(found) > 1 and "/var/run/dockershim.sock" in found:
        return "/var/run/dockershim.sock"  # 1.23: docker + containerd -> dockershim wins
    if len(found) > 1:
        raise Fail(f"Found multiple CRI endpoints on the host. Please define which one do you wish to use by setting "
                   f"the 'criSocket' field in the kubeadm configuration file: {', '.join(found)}")  # fmt: skip
    return found[0] if found else "/var/run/dockershim.sock"


class InitConfig:
    """The merged, defaulted and validated Init+Cluster(+Kubelet) configuration."""

    def __init__(self) -> None:
        self.init: dict = {}
        self.cluster: dict = {}
        self.kubelet: dict | None = None
        self.kube_proxy: dict | None = None

    @property
    def version(self) -> str:
        return self.cluster["kubernetesVersion"]

    @property
    def repo(self) -> str:
        return self.cluster["imageRepository"]

    @property
    def node_name(self) -> str:
        return self.init["nodeRegistration"]["name"]

    @property
    def cri_socket(self) -> str:
        return self.init["nodeRegistration"]["criSocket"]

    @property
    def advertise(self) -> str:
        return self.init["localAPIEndpoint"]["advertiseAddress"]

    @property
    def port(self) -> int:
        return int(self.init["localAPIEndpoint"]["bindPort"])

    @property
    def endpoint(self) -> str:
        cpe = self.cluster.get("controlPlaneEndpoint") or ""
        if cpe:
            return cpe if re.search(r":\d+$", cpe) else f"{cpe}:{self.port}"
        host = f"[{self.advertise}]" if ":" in self.advertise else self.advertise
        return f"{host}:{self.port}"


# `kubeadm init` flags -> (ClusterConfiguration | InitConfiguration, field path), as kubeadm maps them.
INIT_FLAG_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "kubernetes-version": ("cluster", ("kubernetesVersion",)),
    "image-repository": ("cluster", ("imageRepository",)),
    "pod-network-cidr": ("cluster", ("networking", "podSubnet")),
    "service-cidr": ("cluster", ("networking", "serviceSubnet")),
    "service-dns-domain": ("cluster", ("networking", "dnsDomain")),
    "control-plane-endpoint": ("cluster", ("controlPlaneEndpoint",)),
    "apiserver-advertise-address": ("init", ("localAPIEndpoint", "advertiseAddress")),
    "apiserver-bind-port": ("init", ("localAPIEndpoint", "bindPort")),
    "node-name": ("init", ("nodeRegistration", "name")),
    "cri-socket": ("init", ("nodeRegistration", "criSocket")),
}


def load_init_config(path: str | None, flags: dict[str, Any], resolve_host: bool = True) -> InitConfig:
    cfg = InitConfig()
    if path:
        text = read_text(path)
        if text is None:
            raise Fail(f'unable to read config from "{path}" : open {path}: no such file or directory')
        docs = classify_documents(split_documents(text), ("InitConfiguration", "ClusterConfiguration"))
        cfg.init = copy.deepcopy(docs.get("InitConfiguration") or {})
        cfg.cluster = copy.deepcopy(docs.get("ClusterConfiguration") or {})
        cfg.kubelet = copy.deepcopy(docs.get("KubeletConfiguration"))
        cfg.kube_proxy = copy.deepcopy(docs.get("KubeProxyConfiguration"))
    c, i = cfg.cluster, cfg.init
    # flags (only without --config; mixing is refused by the caller)
    for flag, (doc, fields) in INIT_FLAG_FIELDS.items():
        if flags.get(flag):
            target = c if doc == "cluster" else i
            for key in fields[:-1]:
                target = target.setdefault(key, {})
            target[fields[-1]] = flags[flag]
    if flags.get("token") or flags.get("token-ttl"):
        bt = (i.get("bootstrapTokens") or [{}])[0]
        if flags.get("token"):
            bt["token"] = flags["token"]
        if flags.get("token-ttl"):
            bt["ttl"] = flags["token-ttl"]
        i["bootstrapTokens"] = [bt]
    # defaults (SetDefaults_*)
    c.setdefault("apiVersion", f"{KUBEADM_GROUP}/v1beta3")
    c.setdefault("kind", "ClusterConfiguration")
    c["kubernetesVersion"] = normalize_k8s_version(str(c.get("kubernetesVersion") or "stable-1"))
    c["imageRepository"] = c.get("imageRepository") or DEFAULT_IMAGE_REPOSITORY
    c.setdefault("certificatesDir", "/etc/kubernetes/pki")
    c.setdefault("clusterName", "kubernetes")
    c.setdefault("controlPlaneEndpoint", "")
    c["dns"] = c.get("dns") or {}
    c["apiServer"] = c.get("apiServer") or {}
    c["apiServer"].setdefault("timeoutForControlPlane", "4m0s")
    c["controllerManager"] = c.get("controllerManager") or {}
    c["scheduler"] = c.get("scheduler") or {}
    etcd = c.setdefault("etcd", {}) or {}
    c["etcd"] = etcd
    if "external" not in etcd:
        etcd["local"] = etcd.get("local") or {}
        etcd["local"].setdefault("dataDir", "/var/lib/etcd")
    net = c.setdefault("networking", {}) or {}
    c["networking"] = net
    net.setdefault("dnsDomain", "cluster.local")
    net.setdefault("serviceSubnet", "10.96.0.0/12")
    i.setdefault("apiVersion", f"{KUBEADM_GROUP}/v1beta3")
    i.setdefault("kind", "InitConfiguration")
    bts = i.get("bootstrapTokens") or [{}]
    for bt in bts:
        bt.setdefault("groups", ["system:bootstrappers:kubeadm:default-node-token"])
        bt.setdefault("ttl", "24h0m0s")
        bt.setdefault("usages", ["signing", "authentication"])
        bt.setdefault("token", new_token())
    i["bootstrapTokens"] = bts
    lep = i.setdefault("localAPIEndpoint", {}) or {}
    i["localAPIEndpoint"] = lep
    lep.setdefault("bindPort", 6443)
    nr = i.setdefault("nodeRegistration", {}) or {}
    i["nodeRegistration"] = nr
    nr.setdefault("imagePullPolicy", "IfNotPresent")
    if not nr.get("name"):
        nr["name"] = hostname()
    if "taints" not in nr:
        nr["taints"] = [{"effect": "NoSchedule", "key": "node-role.kubernetes.io/master"}]
    if not nr.get("criSocket"):
        nr["criSocket"] = detect_cri_socket()
    if not lep.get("advertiseAddress") and resolve_host:
        lep["advertiseAddress"] = default_advertise_address()
    validate_init_config(cfg)
    return cfg


def validate_init_config(cfg: InitConfig) -> None:
    errs: list[str] = []
    c, i = cfg.cluster, cfg.init
    net = c["networking"]
    for fld in ("podSubnet", "serviceSubnet"):
        val = net.get(fld)
        if val is None:
            continue
        try:
            for part in str(val).split(","):
                ipaddress.ip_network(part.strip(), strict=False)
        except ValueError:
            errs.append(field_invalid(f"networking.{fld}", val, "couldn't parse subnet"))
    if not DNS1123.match(str(net["dnsDomain"])):
        errs.append(field_invalid("networking.dnsDomain", net["dnsDomain"], DNS1123_MSG))
    adv = i["localAPIEndpoint"].get("advertiseAddress")
    if adv is not None:
        try:
            ipaddress.ip_address(adv)
        except ValueError:
            errs.append(field_invalid("localAPIEndpoint.advertiseAddress", adv, "ip address is not valid"))
    try:
        port = int(i["localAPIEndpoint"]["bindPort"])
        if not 0 < port < 65536:
            raise ValueError
    except (TypeError, ValueError):
        errs.append(
            field_invalid(
                "localAPIEndpoint.bindPort", i["localAPIEndpoint"]["bindPort"], "port number is not valid"
            )
        )
    name = str(i["nodeRegistration"]["name"])
    if not DNS1123.match(name) or len(name) > 253:
        errs.append(field_invalid("nodeRegistration.name", name, DNS1123_MSG))
    errs += validate_cri_socket(str(i["nodeRegistration"]["criSocket"]), "nodeRegistration.criSocket")
    for n, bt in enumerate(i["bootstrapTokens"]):
        if not TOKEN_RE.match(str(bt.get("token", ""))):
            errs.append(field_invalid(f"bootstrapTokens[{n}].token", "", "the bootstrap token is invalid"))
        try:
            parse_duration(str(bt.get("ttl", "")))
        except ValueError:
            errs.append(field_invalid(f"bootstrapTokens[{n}].ttl", bt.get("ttl"), "invalid duration"))
    repo = str(c["imageRepository"])
    if not re.match(r"^[A-Za-z0-9.\-_:/\[\]]+$", repo) or repo.endswith("/"):
        errs.append(field_invalid("imageRepository", repo, "invalid image repository"))
    if errs:
        raise Fail(errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]")


def validate_cri_socket(sock: str, path: str) -> list[str]:
    if sock.startswith("unix://"):
        return [] if os.path.isabs(sock[7:]) else [field_invalid(path, sock, "path is not absolute")]
    if "://" in sock:
        return [field_invalid(path, sock, f'URL scheme "{sock.split("://")[0]}" is not supported')]
    return [] if os.path.isabs(sock) else [field_invalid(path, sock, "path is not absolute")]


def control_plane_images(cfg: InitConfig) -> list[str]:
    """kubeadm images.GetControlPlaneImages for 1.23 (order as `config images list` prints)."""
    c = cfg.cluster
    repo, tag = c["imageRepository"], cfg.version.replace("+", "_")
    imgs = [
        f"{repo}/{n}:{tag}"
        for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
    ]
    imgs.append(f"{repo}/pause:{PAUSE_VERSION}")
    local = (c.get("etcd") or {}).get("local")
    if local is not None:
        imgs.append(f"{local.get('imageRepository') or repo}/etcd:{local.get('imageTag') or ETCD_VERSION}")
    dns = c.get("dns") or {}
    dns_repo = dns.get("imageRepository") or repo
    if dns_repo == DEFAULT_IMAGE_REPOSITORY:  # the official image moved to <default>/coredns/coredns
        dns_repo += "/coredns"
    imgs.append(f"{dns_repo}/coredns:{dns.get('imageTag') or COREDNS_VERSION}")
    return imgs


# --------------------------------------------------------------------------- preflight

CheckResult = tuple[list[str], list[str]]  # (warnings, errors)


class Check:
    def __init__(self, name: str, fn: Callable[[], CheckResult]) -> None:
        self.name = name
        self.fn = fn


def check_file_content(path: str, content: str = "1") -> Check:
    def fn() -> CheckResult:
        try:
            with open(hp(path), "rb") as f:
                got = f.read(len(content))
        except OSError:
            return [], [f"{path} does not exist"]
        return ([], []) if got == content.encode() else ([], [f"{path} contents are not set to {content}"])

    return Check("FileContent-" + path.replace("/", "-"), fn)


def check_file_available(path: str) -> Check:
    return Check("FileAvailable-" + path.replace("/", "-"),
                 lambda: ([], [f"{path} already exists"] if os.path.lexists(hp(path)) else []))  # fmt: skip


def check_dir_available(path: str) -> Check:
    def fn() -> CheckResult:
        p = hp(path)
        if not os.path.exists(p):
            return [], []
        try:
            return [], [f"{path} is not empty"] if os.listdir(p) else []
        except OSError as e:
            return [], [f"unable to check if {path} is empty: {e}"]

    return Check("DirAvailable-" + path.replace("/", "-"), fn)


def port_in_use(port: int) -> bool:
    """net.Listen("tcp", ":port") with Go's SO_REUSEADDR."""
    for fam, addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            s = socket.socket(fam, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if fam == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind((addr, port))
            s.listen(1)
            return False
        except OSError as e:
            if e.errno in (98, 13):  # EADDRINUSE, EACCES
                return True
        finally:
            s.close()
    return False


def check_port(port: int) -> Check:
    return Check(f"Port-{port}", lambda: ([], [f"Port {port} is in use"] if port_in_use(port) else []))


def check_swap() -> Check:
    def fn() -> CheckResult:
        text = read_text(hp("/proc/swaps"))
        if text is None:
            return [], []
        lines = [ln for ln in text.split("\n") if ln != ""]
        return (
            ([], ["running with swap on is not supported. Please disable swap"])
            if len(lines) > 1
            else ([], [])
        )

    return Check("Swap", fn)


def check_in_path(tool: str, mandatory: bool) -> Check:
    def fn() -> CheckResult:
        if shutil.which(tool):
            return [], []
        msg = f"{tool} not found in system path"
        return ([], [msg]) if mandatory else ([msg], [])

    return Check(f"FileExisting-{tool.replace('/', '-')}", fn)


def num_cpu() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def mem_total_mb() -> int:
    m = re.search(r"MemTotal:\s+(\d+) kB", read_text(hp("/proc/meminfo")) or "")
    return int(m.group(1)) // 1024 if m else 0


def check_num_cpu(required: int = 2) -> Check:
    def fn() -> CheckResult:
        n = num_cpu()
        return [], [
            f"the number of available CPUs {n} is less than the required {required}"
        ] if n < required else []

    return Check("NumCPU", fn)


def check_mem(required: int = 1700) -> Check:
    def fn() -> CheckResult:
        mb = mem_total_mb()
        return [], [
            f"the system RAM ({mb} MB) is less than the minimum {required} MB"
        ] if mb < required else []

    return Check("Mem", fn)


def check_cri(sock: str) -> Check:
    def fn() -> CheckResult:
        rc, out = crictl_info_probe(sock)
        return (
            ([], [])
            if rc == 0
            else ([], [f"container runtime is not running: output: {out}, error: exit status {rc}"])
        )

    return Check("CRI", fn)


def check_service(svc: str) -> Check:
    def fn() -> CheckResult:
        if not shutil.which("systemctl"):
            return ["no supported init system detected, skipping checking for services"], []
        _, out = systemctl("status", f"{svc}.service", "--no-pager")
        if "Loaded: not-found" in out or "could not be found" in out:
            return [f"{svc} service does not exist"], []
        rc, _ = systemctl("is-enabled", f"{svc}.service")
        return (
            ([f"{svc} service is not enabled, please run 'systemctl enable {svc}.service'"], [])
            if rc
            else ([], [])
        )

    return Check(f"Service-{svc.title()}", fn)


def check_hostname(node: str) -> Check:
    def fn() -> CheckResult:
        warns = [] if DNS1123.match(node) else [f'invalid node name format "{node}": {DNS1123_MSG}']
        try:
            socket.getaddrinfo(node, None)
        except OSError:
            warns += [f'hostname "{node}" could not be reached',
                      f'hostname "{node}": lookup {node} on 127.0.0.53:53: no such host']  # fmt: skip
        return warns, []

    return Check("Hostname", fn)


def check_kubelet_version(k8s_version: str) -> Check:
    def fn() -> CheckResult:
        rc, out = run(["kubelet", "--version"])
        if rc == 127:
            return [
                "couldn't get kubelet version: cannot execute 'kubelet --version': executable file not found in $PATH"
            ], []
        kv = parse_version(out.strip().rsplit(" ", 1)[-1])
        if kv is None:
            return [], [f"couldn't parse kubelet version: {out.strip()}"]
        if kv < MIN_CONTROL_PLANE:
            return [], [
                f'Kubelet version "v{".".join(map(str, kv))}" is lower than kubeadm can support. Please upgrade kubelet'
            ]
        cp = parse_version(k8s_version) if k8s_version else None
        if cp and kv[:2] > cp[:2]:
            return [], ["the kubelet version is higher than the control plane version. This is not a supported "
                        f'version skew and may lead to a malfunctional cluster. Kubelet version: "{out.strip().split()[-1]}" '
                        f'Control plane version: "{k8s_version}"']  # fmt: skip
        return [], []

    return Check("KubeletVersion", fn)


def check_k8s_version(k8s_version: str) -> Check:
    def fn() -> CheckResult:
        kv, mine = parse_version(k8s_version), parse_version(VERSION)
        if kv and mine and kv[:2] > mine[:2]:
            return ["Kubernetes version is greater than kubeadm version. Please consider to upgrade kubeadm. "
                    f"Kubernetes version: {k8s_version.lstrip('v')}. Kubeadm version: {mine[0]}.{mine[1]}.x"], []  # fmt: skip
        return [], []

    return Check("KubernetesVersion", fn)


def check_system_verification() -> Check:
    def fn() -> CheckResult:
        errs, warns = [], []
        rel = os.uname().release
        kv = tuple(int(x) for x in re.findall(r"\d+", rel)[:2])
        if kv < (3, 10):
            errs.append(
                f"kernel release {rel} is unsupported. Recommended LTS version from the 4.x series is 4.4."
            )
        cg = read_text(hp("/proc/cgroups")) or ""
        enabled = {
            ln.split()[0] for ln in cg.splitlines()[1:] if len(ln.split()) >= 4 and ln.split()[3] == "1"
        }
        missing = [
            c
            for c in ("cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids")
            if c not in enabled
        ]
        if cg and missing:
            errs.append(f"missing required cgroups: {' '.join(missing)}")
        configs = ["/proc/config.gz", f"/boot/config-{rel}", f"/lib/modules/{rel}/config"]
        if not any(os.path.exists(hp(p)) for p in configs):
            warns.append('failed to parse kernel config: unable to load kernel module: "configs", output: "modprobe: '
                         f'FATAL: Module configs not found in directory /lib/modules/{rel}\\n", err: exit status 1')  # fmt: skip
        return warns, errs

    return Check("SystemVerification", fn)


def check_firewalld(ports: list[int]) -> Check:
    def fn() -> CheckResult:
        rc, _ = systemctl("is-active", "firewalld") if shutil.which("systemctl") else (1, "")
        if rc == 0:
            plist = " ".join(map(str, ports))
            return [
                f"firewalld is active, please ensure ports [{plist}] are open or your cluster may not function correctly"
            ], []
        return [], []

    return Check("Firewalld", fn)


def common_checks(k8s_version: str, node: str, cri: str) -> list[Check]:
    """preflight.addCommonChecks (1.23, Linux, containerd)."""
    checks = [check_cri(cri)]
    if "dockershim" not in cri:
        checks.append(check_in_path("crictl", True))
    checks += [
        check_file_content("/proc/sys/net/bridge/bridge-nf-call-iptables"),
        check_file_content("/proc/sys/net/ipv4/ip_forward"),
        check_swap(),
    ]
    checks += [check_in_path(t, True) for t in TOOLS_MANDATORY]
    checks += [check_in_path(t, False) for t in TOOLS_OPTIONAL]
    checks += [
        check_system_verification(),
        check_hostname(node),
        check_kubelet_version(k8s_version),
        check_service("kubelet"),
        check_port(10250),
    ]
    return checks


def init_checks(cfg: InitConfig) -> list[Check]:
    md = "/etc/kubernetes/manifests"
    names = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
    checks = [
        check_num_cpu(),
        check_mem(),
        check_k8s_version(cfg.version),
        check_firewalld([cfg.port, 10250]),
        check_port(cfg.port),
        check_port(10259),
        check_port(10257),
        *(check_file_available(f"{md}/{n}.yaml") for n in names),
    ]
    checks += common_checks(cfg.version, cfg.node_name, cfg.cri_socket)
    local = (cfg.cluster.get("etcd") or {}).get("local")
    if local is not None:
        checks += [
            check_port(2379),
            check_port(2380),
            check_dir_available(local.get("dataDir", "/var/lib/etcd")),
        ]
    return checks


def join_checks(node: str, cri: str) -> list[Check]:
    checks = [check_file_available("/etc/kubernetes/kubelet.conf"),
              check_file_available("/etc/kubernetes/bootstrap-kubelet.conf")]  # fmt: skip
    checks += common_checks("", node, cri)
    checks.append(check_file_available("/etc/kubernetes/pki/ca.crt"))
    return checks


def parse_ignore(values: list[str], from_config: list[str] | None = None) -> set[str]:
    out = {v.strip().lower() for val in values for v in val.split(",") if v.strip()}
    out |= {v.lower() for v in from_config or []}
    if "all" in out and len(out) > 1:
        raise Fail(
            field_invalid(
                "ignore-preflight-errors",
                ",".join(sorted(out)),
                "don't specify individual checks if 'all' is used",
            )
        )
    return out


def run_checks(checks: list[Check], ignore: set[str], warn_out: Any = None) -> None:
    """preflight.RunChecks: warnings to stderr as they come, errors collected into one failure."""
    warn_out = warn_out or sys.stderr
    errbuf = ""
    for c in checks:
        warns, errs = c.fn()
        if "all" in ignore or c.name.lower() in ignore:
            warns, errs = warns + errs, []
        for w in warns:
            warn_out.write(f"\t[WARNING {c.name}]: {w}\n")
        for e in errs:
            errbuf += f"\t[ERROR {c.name}]: {e}\n"
    if errbuf:
        raise Fail(
            "[preflight] Some fatal errors occurred:\n" + errbuf
            + "[preflight] If you know what you are doing, you can make a check non-fatal with "
            "`--ignore-preflight-errors=...`"
        )  # fmt: skip


def root_check(ignore: set[str]) -> None:
    ok = os.geteuid() == 0
    run_checks(
        [Check("IsPrivilegedUser", lambda: ([], [] if ok else ["user is not running as root"]))], ignore
    )


# --------------------------------------------------------------------------- containerd (what crictl talks to)


def sock_path(endpoint: str) -> str:
    return endpoint[7:] if endpoint.startswith("unix://") else endpoint


def ctr(endpoint: str, *args: str, timeout: float = 30) -> tuple[int, str]:
    return run(["ctr", "--address", sock_path(endpoint), "--connect-timeout", "2s", *args], timeout=timeout)


def crictl_fatal(msg: str) -> str:
    """crictl's logrus fatal line (non-tty form, as kubeadm captures it)."""
    return f'time="{dt.datetime.now().astimezone().isoformat(timespec="seconds")}" level=fatal msg="{msg}"\n'


def crictl_info_probe(endpoint: str) -> tuple[int, str]:
    """`crictl -r ENDPOINT info` as kubeadm's CRI check runs it: (rc, combined output)."""
    rc, out = ctr(endpoint, "version", timeout=10)
    if rc == 0 and "Server:" in out:
        return 0, json.dumps(cri_info(endpoint, out), indent=2) + "\n"
    ep = endpoint if "://" in endpoint else f"unix://{endpoint}"
    return 1, crictl_fatal(f"connect: connect endpoint '{ep}', make sure you are running as root and the endpoint "
                           "has been started: context deadline exceeded")  # fmt: skip


def containerd_config() -> dict:
    """The CRI plugin settings that matter here, from /etc/containerd/config.toml (containerd defaults otherwise)."""
    out: dict[str, Any] = {"systemd_cgroup": False, "conf_dir": "/etc/cni/net.d", "bin_dir": "/opt/cni/bin",
                           "sandbox_image": "registry.k8s.io/pause:3.6", "config_path": "",
                           "auth": {}}  # fmt: skip
    text = read_text(hp("/etc/containerd/config.toml")) or ""
    try:
        import tomllib  # python 3.11+ (Debian 12)

        doc = tomllib.loads(text)
        cri = (doc.get("plugins") or {}).get("io.containerd.grpc.v1.cri") or {}
        runc = ((cri.get("containerd") or {}).get("runtimes") or {}).get("runc") or {}
        out["systemd_cgroup"] = bool((runc.get("options") or {}).get("SystemdCgroup", False))
        out["conf_dir"] = (cri.get("cni") or {}).get("conf_dir", out["conf_dir"])
        out["bin_dir"] = (cri.get("cni") or {}).get("bin_dir", out["bin_dir"])
        out["sandbox_image"] = cri.get("sandbox_image", out["sandbox_image"])
        out["config_path"] = (cri.get("registry") or {}).get("config_path", "")
        for host, conf in ((cri.get("registry") or {}).get("configs") or {}).items():
            auth = (conf or {}).get("auth") or {}
            if auth.get("username"):
                out["auth"][host] = f"{auth['username']}:{auth.get('password', '')}"
    except ImportError:
        out["systemd_cgroup"] = bool(re.search(r"SystemdCgroup\s*=\s*true", text))
    except ValueError:
        pass
    return out


def cni_ready(conf_dir: str | None = None) -> tuple[bool, str]:
    """containerd's CNI status: a loadable network config in conf_dir."""
    d = hp(conf_dir or containerd_config()["conf_dir"])
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith((".conf", ".conflist", ".json")))
    except OSError:
        names = []
    for n in names:
        try:
            doc = json.loads(read_text(os.path.join(d, n)) or "")
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        if n.endswith(".conflist") and isinstance(doc.get("plugins"), list) and doc["plugins"]:
            return True, ""
        if not n.endswith(".conflist") and doc.get("type"):
            return True, ""
    return False, "Network plugin returns error: cni plugin not initialized"


def containerd_version(ctr_version_out: str) -> str:
    m = re.search(r"Server:\s*\n\s*Version:\s*(\S+)", ctr_version_out)
    return m.group(1) if m else "unknown"


def cri_info(endpoint: str, ctr_version_out: str) -> dict:
    cfg = containerd_config()
    net_ok, net_msg = cni_ready(cfg["conf_dir"])
    conds = [{"type": "RuntimeReady", "status": True, "reason": "", "message": ""},
             {"type": "NetworkReady", "status": net_ok, "reason": "" if net_ok else "NetworkPluginNotReady",
              "message": net_msg}]  # fmt: skip
    return {
        "status": {"conditions": conds},
        "cniconfig": {"PluginDirs": [cfg["bin_dir"]], "PluginConfDir": cfg["conf_dir"]},
        "config": {"sandboxImage": cfg["sandbox_image"], "systemdCgroup": cfg["systemd_cgroup"],
                   "registry": {"configPath": cfg["config_path"]},
                   "containerdVersion": containerd_version(ctr_version_out)},
    }  # fmt: skip


def image_exists(endpoint: str, image: str) -> bool:
    rc, out = ctr(endpoint, "-n", "k8s.io", "images", "ls", "-q")
    return rc == 0 and image in out.split()


def pull_image(endpoint: str, image: str) -> tuple[int, str]:
    """What `crictl pull` makes containerd's CRI plugin do: pull into k8s.io using the registry hosts dir."""
    args = ["-n", "k8s.io", "images", "pull"]
    cfg = containerd_config()
    if cfg["config_path"]:
        args += ["--hosts-dir", cfg["config_path"]]
    host = image.split("/", 1)[0]
    if host in cfg["auth"]:  # CRI registry.configs.<host>.auth, as containerd's CRI plugin uses it
        args += ["--user", cfg["auth"][host]]
    rc, out = ctr(endpoint, *args, image, timeout=300)
    if rc != 0:
        last = out.strip().splitlines()[-1] if out.strip() else "unknown error"
        return 1, crictl_fatal(f"pulling image: rpc error: code = Unknown desc = failed to pull and unpack image "
                               f'\\"{image}\\": {last}')  # fmt: skip
    return 0, f"Image is up to date for {image}\n"


def check_image_pull(endpoint: str, images: list[str]) -> Check:
    def fn() -> CheckResult:
        errs = []
        for img in images:
            if image_exists(endpoint, img):
                continue
            rc, out = pull_image(endpoint, img)
            if rc:
                errs.append(f"failed to pull image {img}: output: {out}, error: exit status 1")
        return [], errs

    return Check("ImagePull", fn)


# --------------------------------------------------------------------------- kubeadm: files it writes

K8S = "/etc/kubernetes"
PKI = "/etc/kubernetes/pki"
MANIFESTS = "/etc/kubernetes/manifests"
KUBELET_DIR = "/var/lib/kubelet"
STATE_DIR = "/var/lib/standin-apiserver"
KUBELET_CONFIG_CM = f"kubelet-config-{VERSION[1:5]}"


def first_ip(cidr: str, n: int) -> str:
    net = ipaddress.ip_network(cidr.split(",")[0].strip(), strict=False)
    return str(net.network_address + n)


def kubelet_config_doc(cfg: InitConfig) -> dict:
    doc = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"cacheTTL": "0s", "enabled": True},
                           "x509": {"clientCAFile": f"{PKI}/ca.crt"}},
        "authorization": {"mode": "Webhook", "webhook": {"cacheAuthorizedTTL": "0s", "cacheUnauthorizedTTL": "0s"}},
        "cgroupDriver": "systemd",  # kubeadm >= 1.22 default
        "clusterDNS": [first_ip(cfg.cluster["networking"]["serviceSubnet"], 10)],
        "clusterDomain": cfg.cluster["networking"]["dnsDomain"],
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "rotateCertificates": True,
        "staticPodPath": MANIFESTS,
        "resolvConf": "/etc/resolv.conf",
        "nodeStatusUpdateFrequency": "0s",
    }  # fmt: skip
    doc.update(cfg.kubelet or {})
    return doc


def kubeadm_flags_env(cri: str, repo: str, node: str, extra: dict[str, str]) -> str:
    flags = {}
    if "dockershim" not in cri:
        flags["container-runtime"] = "remote"
        flags["container-runtime-endpoint"] = cri
    flags["pod-infra-container-image"] = f"{repo}/pause:{PAUSE_VERSION}"
    if node != hostname():
        flags["hostname-override"] = node
    flags.update(extra or {})
    return 'KUBELET_KUBEADM_ARGS="' + " ".join(f"--{k}={v}" for k, v in flags.items()) + '"\n'


def static_pod(name: str, image: str, command: list[str], host_paths: dict[str, str], port: int,
               annotations: dict[str, str] | None = None) -> dict:  # fmt: skip
    vols = [{"hostPath": {"path": p, "type": "DirectoryOrCreate"}, "name": n} for n, p in host_paths.items()]
    mounts = [{"mountPath": p, "name": n, "readOnly": True} for n, p in host_paths.items()]
    etcd = name == "etcd"
    probe = {"failureThreshold": 8, "httpGet": {"host": "127.0.0.1", "path": "/health" if etcd else "/healthz",
             "port": port, "scheme": "HTTP" if etcd else "HTTPS"},
             "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 15}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"annotations": annotations or {}, "creationTimestamp": None,
                     "labels": {"component": name, "tier": "control-plane"}, "name": name,
                     "namespace": "kube-system"},
        "spec": {"containers": [{"command": command, "image": image, "imagePullPolicy": "IfNotPresent",
                                 "livenessProbe": probe, "name": name, "resources": {"requests": {"cpu": "250m"}},
                                 "startupProbe": dict(probe, failureThreshold=24), "volumeMounts": mounts}],
                 "hostNetwork": True, "priorityClassName": "system-node-critical",
                 "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}, "volumes": vols},
        "status": {},
    }  # fmt: skip


def flags_list(binary: str, defaults: dict[str, str], extra: dict[str, str] | None) -> list[str]:
    merged = dict(defaults)
    merged.update({k: str(v) for k, v in (extra or {}).items()})
    return [binary] + [f"--{k}={v}" for k, v in sorted(merged.items())]


def control_plane_manifests(cfg: InitConfig) -> dict[str, dict]:
    c, repo, tag = cfg.cluster, cfg.repo, cfg.version
    net = c["networking"]
    certs = {"ca-certs": "/etc/ssl/certs", "etc-ca-certificates": "/etc/ca-certificates", "k8s-certs": PKI,
             "usr-local-share-ca-certificates": "/usr/local/share/ca-certificates",
             "usr-share-ca-certificates": "/usr/share/ca-certificates"}  # fmt: skip
    api = {
        "advertise-address": cfg.advertise, "allow-privileged": "true", "authorization-mode": "Node,RBAC",
        "client-ca-file": f"{PKI}/ca.crt", "enable-admission-plugins": "NodeRestriction",
        "enable-bootstrap-token-auth": "true", "etcd-cafile": f"{PKI}/etcd/ca.crt",
        "etcd-certfile": f"{PKI}/apiserver-etcd-client.crt", "etcd-keyfile": f"{PKI}/apiserver-etcd-client.key",
        "etcd-servers": "https://127.0.0.1:2379",
        "kubelet-client-certificate": f"{PKI}/apiserver-kubelet-client.crt",
        "kubelet-client-key": f"{PKI}/apiserver-kubelet-client.key",
        "kubelet-preferred-address-types": "InternalIP,ExternalIP,Hostname",
        "proxy-client-cert-file": f"{PKI}/front-proxy-client.crt",
        "proxy-client-key-file": f"{PKI}/front-proxy-client.key",
        "requestheader-allowed-names": "front-proxy-client",
        "requestheader-client-ca-file": f"{PKI}/front-proxy-ca.crt",
        "requestheader-extra-headers-prefix": "X-Remote-Extra-", "requestheader-group-headers": "X-Remote-Group",
        "requestheader-username-headers": "X-Remote-User", "secure-port": str(cfg.port),
        "service-account-issuer": f"https://kubernetes.default.svc.{net['dnsDomain']}",
        "service-account-key-file": f"{PKI}/sa.pub", "service-account-signing-key-file": f"{PKI}/sa.key",
        "service-cluster-ip-range": net["serviceSubnet"], "tls-cert-file": f"{PKI}/apiserver.crt",
        "tls-private-key-file": f"{PKI}/apiserver.key",
    }  # fmt: skip
    cm = {
        "authentication-kubeconfig": f"{K8S}/controller-manager.conf",
        "authorization-kubeconfig": f"{K8S}/controller-manager.conf", "bind-address": "127.0.0.1",
        "client-ca-file": f"{PKI}/ca.crt", "cluster-name": c["clusterName"],
        "cluster-signing-cert-file": f"{PKI}/ca.crt", "cluster-signing-key-file": f"{PKI}/ca.key",
        "controllers": "*,bootstrapsigner,tokencleaner", "kubeconfig": f"{K8S}/controller-manager.conf",
        "leader-elect": "true", "requestheader-client-ca-file": f"{PKI}/front-proxy-ca.crt",
        "root-ca-file": f"{PKI}/ca.crt", "service-account-private-key-file": f"{PKI}/sa.key",
        "service-cluster-ip-range": net["serviceSubnet"], "use-service-account-credentials": "true",
    }  # fmt: skip
    if net.get("podSubnet"):
        cm.update({"allocate-node-cidrs": "true", "cluster-cidr": net["podSubnet"]})
    sched = {"authentication-kubeconfig": f"{K8S}/scheduler.conf",
             "authorization-kubeconfig": f"{K8S}/scheduler.conf", "bind-address": "127.0.0.1",
             "kubeconfig": f"{K8S}/scheduler.conf", "leader-elect": "true"}  # fmt: skip
    out = {
        "kube-apiserver": static_pod(
            "kube-apiserver", f"{repo}/kube-apiserver:{tag}",
            flags_list("kube-apiserver", api, c["apiServer"].get("extraArgs")), certs, cfg.port,
            {"kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint": f"{cfg.advertise}:{cfg.port}"}),
        "kube-controller-manager": static_pod(
            "kube-controller-manager", f"{repo}/kube-controller-manager:{tag}",
            flags_list("kube-controller-manager", cm, c["controllerManager"].get("extraArgs")),
            dict(certs, kubeconfig=f"{K8S}/controller-manager.conf"), 10257),
        "kube-scheduler": static_pod(
            "kube-scheduler", f"{repo}/kube-scheduler:{tag}",
            flags_list("kube-scheduler", sched, c["scheduler"].get("extraArgs")),
            {"kubeconfig": f"{K8S}/scheduler.conf"}, 10259),
    }  # fmt: skip
    local = (c.get("etcd") or {}).get("local")
    if local is not None:
        img = next(i for i in control_plane_images(cfg) if "/etcd:" in i)
        adv = cfg.advertise
        etcd = {"advertise-client-urls": f"https://{adv}:2379", "cert-file": f"{PKI}/etcd/server.crt",
                "client-cert-auth": "true", "data-dir": local["dataDir"],
                "initial-advertise-peer-urls": f"https://{adv}:2380",
                "initial-cluster": f"{cfg.node_name}=https://{adv}:2380", "key-file": f"{PKI}/etcd/server.key",
                "listen-client-urls": f"https://127.0.0.1:2379,https://{adv}:2379",
                "listen-metrics-urls": "http://127.0.0.1:2381", "listen-peer-urls": f"https://{adv}:2380",
                "name": cfg.node_name, "peer-cert-file": f"{PKI}/etcd/peer.crt",
                "peer-client-cert-auth": "true", "peer-key-file": f"{PKI}/etcd/peer.key",
                "peer-trusted-ca-file": f"{PKI}/etcd/ca.crt", "snapshot-count": "10000",
                "trusted-ca-file": f"{PKI}/etcd/ca.crt"}  # fmt: skip
        out["etcd"] = static_pod("etcd", img, flags_list("etcd", etcd, local.get("extraArgs")),
                                 {"etcd-certs": f"{PKI}/etcd", "etcd-data": local["dataDir"]}, 2381,
                                 {"kubeadm.kubernetes.io/etcd.advertise-client-urls": f"https://{adv}:2379"})  # fmt: skip
    return out


def apiserver_unit(self_path: str) -> str:
    return (
        "# TEST-ONLY (tests/standin): plays the kube-apiserver static pod; the kubelet stand-in starts,\n"
        "# restarts and stops it from /etc/kubernetes/manifests/kube-apiserver.yaml.\n"
        "[Unit]\nDescription=kube-apiserver stand-in (TEST ONLY)\n\n"
        f"[Service]\nExecStart={self_path} __standin-apiserver {MANIFESTS}/kube-apiserver.yaml\n"
        "Restart=on-failure\nRestartSec=2\n"
    )


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s.strip("[]"))
        return True
    except ValueError:
        return False


def write_pki(cfg: InitConfig, out: Any) -> None:
    pki = hp(PKI)
    os.makedirs(pki, exist_ok=True)
    out.write(f'[certs] Using certificateDir folder "{PKI}"\n')
    ca, cak = f"{pki}/ca.crt", f"{pki}/ca.key"
    if os.path.exists(ca) and os.path.exists(cak):
        out.write("[certs] Using existing ca certificate authority\n")
    else:
        out.write('[certs] Generating "ca" certificate and key\n')
        make_ca(ca, cak, "kubernetes")
    svc_ip = first_ip(cfg.cluster["networking"]["serviceSubnet"], 1)
    dom = cfg.cluster["networking"]["dnsDomain"]
    sans_extra = cfg.cluster["apiServer"].get("certSANs") or []
    dns = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", f"kubernetes.default.svc.{dom}",
           cfg.node_name, *sans_extra]  # fmt: skip
    ips = [svc_ip, cfg.advertise]
    cpe = (cfg.cluster.get("controlPlaneEndpoint") or "").rsplit(":", 1)[0]
    if cpe:
        (ips if _is_ip(cpe) else dns).append(cpe)
    sans = [f"IP:{x}" if _is_ip(x) else f"DNS:{x}" for x in dns + ips]
    out.write('[certs] Generating "apiserver" certificate and key\n')
    out.write(
        f"[certs] apiserver serving cert is signed for DNS names [{' '.join(dns)}] and IPs [{' '.join(ips)}]\n"
    )
    make_cert(f"{pki}/apiserver.crt", f"{pki}/apiserver.key", ca, cak, "kube-apiserver", server=True, client=False,
              sans=sans)  # fmt: skip
    out.write('[certs] Generating "apiserver-kubelet-client" certificate and key\n')
    make_cert(f"{pki}/apiserver-kubelet-client.crt", f"{pki}/apiserver-kubelet-client.key", ca, cak,
              "kube-apiserver-kubelet-client", ["system:masters"])  # fmt: skip
    out.write('[certs] Generating "front-proxy-ca" certificate and key\n')
    make_ca(f"{pki}/front-proxy-ca.crt", f"{pki}/front-proxy-ca.key", "front-proxy-ca")
    out.write('[certs] Generating "front-proxy-client" certificate and key\n')
    make_cert(f"{pki}/front-proxy-client.crt", f"{pki}/front-proxy-client.key", f"{pki}/front-proxy-ca.crt",
              f"{pki}/front-proxy-ca.key", "front-proxy-client")  # fmt: skip
    if (cfg.cluster.get("etcd") or {}).get("local") is not None:
        ec, eck = f"{pki}/etcd/ca.crt", f"{pki}/etcd/ca.key"
        out.write('[certs] Generating "etcd/ca" certificate and key\n')
        make_ca(ec, eck, "etcd-ca")
        esans = ["DNS:localhost", f"DNS:{cfg.node_name}", f"IP:{cfg.advertise}", "IP:127.0.0.1", "IP:::1"]
        for n in ("server", "peer"):
            out.write(f'[certs] Generating "etcd/{n}" certificate and key\n')
            out.write(f"[certs] etcd/{n} serving cert is signed for DNS names [{cfg.node_name} localhost] and IPs "
                      f"[{cfg.advertise} 127.0.0.1 ::1]\n")  # fmt: skip
            make_cert(
                f"{pki}/etcd/{n}.crt", f"{pki}/etcd/{n}.key", ec, eck, cfg.node_name, server=True, sans=esans
            )
        out.write('[certs] Generating "etcd/healthcheck-client" certificate and key\n')
        make_cert(f"{pki}/etcd/healthcheck-client.crt", f"{pki}/etcd/healthcheck-client.key", ec, eck,
                  "kube-etcd-healthcheck-client")  # fmt: skip
        out.write('[certs] Generating "apiserver-etcd-client" certificate and key\n')
        make_cert(f"{pki}/apiserver-etcd-client.crt", f"{pki}/apiserver-etcd-client.key", ec, eck,
                  "kube-apiserver-etcd-client")  # fmt: skip
    out.write('[certs] Generating "sa" key and public key\n')
    gen_key(f"{pki}/sa.key")
    write_file(f"{pki}/sa.pub", _openssl(["pkey", "-in", f"{pki}/sa.key", "-pubout"]))


def client_kubeconfig(cfg: InitConfig, user: str, orgs: list[str]) -> str:
    pki = hp(PKI)
    with tempfile.TemporaryDirectory() as td:
        make_cert(f"{td}/c.crt", f"{td}/c.key", f"{pki}/ca.crt", f"{pki}/ca.key", user, orgs)
        cred = {"client-certificate-data": b64(read_text(f"{td}/c.crt") or ""),
                "client-key-data": b64(read_text(f"{td}/c.key") or "")}  # fmt: skip
    return kubeconfig(
        f"https://{cfg.endpoint}", read_text(f"{pki}/ca.crt") or "", user, cred, cfg.cluster["clusterName"]
    )


# --------------------------------------------------------------------------- flag parsing (pflag-like)


def parse_flags(argv: list[str], spec: dict[str, str], short: dict[str, str] | None = None
                ) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """spec: name -> 'str' | 'bool' | 'list'.  Returns (flags, positionals)."""
    short = short or {}
    flags: dict[str, Any] = {}
    pos: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "--":
            pos += argv[i:]
            break
        if a.startswith("-") and len(a) > 1 and not a[1].isdigit():
            long = a.startswith("--")
            name, eq, val = (a[2:] if long else a[1:]).partition("=")
            if not long:
                if name[:1] not in short:
                    raise Fail(f"unknown shorthand flag: '{name[:1]}' in {a}")
                if len(name) > 1 and not eq:  # -oyaml / -nkube-system
                    name, eq, val = name[0], "=", name[1:]
                name = short[name[:1]]
            if name not in spec:
                raise Fail(f"unknown flag: --{name}")
            kind = spec[name]
            if kind == "bool":
                flags[name] = val.lower() not in ("false", "0") if eq else True
                continue
            if not eq:
                if i >= len(argv):
                    raise Fail(f"flag needs an argument: --{name}")
                val = argv[i]
                i += 1
            if kind == "list":
                flags.setdefault(name, []).append(val)
            else:
                flags[name] = val
        else:
            pos.append(a)
    return flags, pos


# --------------------------------------------------------------------------- kubeadm commands

INIT_FLAGS = {
    "config": "str", "ignore-preflight-errors": "list", "kubernetes-version": "str", "pod-network-cidr": "str",
    "service-cidr": "str", "service-dns-domain": "str", "apiserver-advertise-address": "str",
    "apiserver-bind-port": "str", "apiserver-cert-extra-sans": "str", "token": "str", "token-ttl": "str",
    "node-name": "str", "cri-socket": "str", "image-repository": "str", "upload-certs": "bool",
    "skip-phases": "list", "control-plane-endpoint": "str", "certificate-key": "str", "skip-token-print": "bool",
    "skip-certificate-key-print": "bool", "dry-run": "bool", "v": "str", "feature-gates": "str",
    "cert-dir": "str", "patches": "str", "rootfs": "str",
}  # fmt: skip
INIT_MIXABLE = {"config", "ignore-preflight-errors", "skip-phases", "dry-run", "upload-certs", "certificate-key",
                "skip-token-print", "skip-certificate-key-print", "v", "patches", "rootfs"}  # fmt: skip


def admin_client(kubeconfig_path: str = f"{K8S}/admin.conf", timeout: float = 10) -> ApiClient:
    if not os.path.exists(hp(kubeconfig_path)):
        raise Fail(f"failed to load admin kubeconfig: open {kubeconfig_path}: no such file or directory")
    return ApiClient(Credentials.from_kubeconfig(load_kubeconfig(hp(kubeconfig_path))), timeout=timeout)


def wait_for(pred: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    end = now() + timeout
    while True:
        try:
            if pred():
                return True
        except (Unreachable, ApiError, OSError):
            pass
        if now() >= end:
            return False
        time.sleep(interval)


def kubelet_healthy() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 10248), timeout=2) as s:
            s.sendall(b"GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n")
            return b"200" in s.recv(64)
    except OSError:
        return False


KUBELET_TROUBLE = """
	Unfortunately, an error has occurred:
		timed out waiting for the condition

	This error is likely caused by:
		- The kubelet is not running
		- The kubelet is unhealthy due to a misconfiguration of the node in some way (required cgroups disabled)

	If you are on a systemd-powered system, you can try to troubleshoot the error with the following commands:
		- 'systemctl status kubelet'
		- 'journalctl -xeu kubelet'

	Additionally, a control plane component may have crashed or exited when started by the container runtime.
	To troubleshoot, list all containers using your preferred container runtimes CLI.
"""


def kubelet_check_messages(out: Any) -> None:
    out.write("[kubelet-check] It seems like the kubelet isn't running or healthy.\n")
    out.write("[kubelet-check] The HTTP call equal to 'curl -sSL http://localhost:10248/healthz' failed with error: "
              'Get "http://localhost:10248/healthz": dial tcp [::1]:10248: connect: connection refused.\n')  # fmt: skip


def phase(name: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except Fail as e:
        raise Fail(f"error execution phase {name}: {e.message}", e.code) from e
    except (Unreachable, ApiError) as e:
        raise Fail(
            f"error execution phase {name}: {getattr(e, 'message', None) or getattr(e, 'reason', e)}"
        ) from e


def post_obj(client: ApiClient, obj: dict) -> None:
    g, v = group_of(obj["apiVersion"])
    plural = next(r[3] for r in BUILTIN_RESOURCES if r[0] == g and r[2] == obj["kind"])
    client.call("POST", res_path(g, v, plural, obj["metadata"].get("namespace")), obj)


def self_path() -> str:
    return (
        os.path.abspath(sys.argv[0])
        if os.path.isabs(sys.argv[0])
        else (shutil.which("kubeadm") or "/usr/bin/kubeadm")
    )


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, default_flow_style=False)


def cmd_kubeadm_init(argv: list[str]) -> int:
    flags, _ = parse_flags(argv, INIT_FLAGS)
    if flags.get("config"):
        mixed = sorted(k for k in flags if k not in INIT_MIXABLE)
        if mixed:
            raise Fail(f"can not mix '--config' with arguments [{' '.join(mixed)}]")
    cfg = load_init_config(flags.get("config"), flags)
    nr = cfg.init["nodeRegistration"]
    ignore = parse_ignore(flags.get("ignore-preflight-errors", []), nr.get("ignorePreflightErrors"))
    skip = {s for v in flags.get("skip-phases", []) for s in v.split(",")} | set(
        cfg.init.get("skipPhases") or []
    )
    out = sys.stdout
    out.write(f"[init] Using Kubernetes version: {cfg.version}\n")

    def preflight() -> None:
        out.write("[preflight] Running pre-flight checks\n")
        out.flush()
        root_check(ignore)
        run_checks(init_checks(cfg), ignore)
        out.write("[preflight] Pulling images required for setting up a Kubernetes cluster\n")
        out.write(
            "[preflight] This might take a minute or two, depending on the speed of your internet connection\n"
        )
        out.write(
            "[preflight] You can also perform this action in beforehand using 'kubeadm config images pull'\n"
        )
        out.flush()
        run_checks([check_image_pull(cfg.cri_socket, control_plane_images(cfg))], ignore)

    if "preflight" not in skip:
        phase("preflight", preflight)
    phase("certs", lambda: write_pki(cfg, out))

    def kubeconfigs() -> None:
        out.write(f'[kubeconfig] Using kubeconfig folder "{K8S}"\n')
        for fname, user, orgs in (("admin.conf", "kubernetes-admin", ["system:masters"]),
                                  ("kubelet.conf", f"system:node:{cfg.node_name}", ["system:nodes"]),
                                  ("controller-manager.conf", "system:kube-controller-manager", []),
                                  ("scheduler.conf", "system:kube-scheduler", [])):  # fmt: skip
            out.write(f'[kubeconfig] Writing "{fname}" kubeconfig file\n')
            write_file(hp(f"{K8S}/{fname}"), client_kubeconfig(cfg, user, orgs), 0o600)

    phase("kubeconfig", kubeconfigs)

    def kubelet_start() -> None:
        systemctl("stop", "kubelet")  # like TryStopKubelet: no race while the files change
        env = kubeadm_flags_env(cfg.cri_socket, cfg.repo, cfg.node_name, nr.get("kubeletExtraArgs") or {})
        out.write(
            f'[kubelet-start] Writing kubelet environment file with flags to file "{KUBELET_DIR}/kubeadm-flags.env"\n'
        )
        write_file(hp(f"{KUBELET_DIR}/kubeadm-flags.env"), env)
        out.write(f'[kubelet-start] Writing kubelet configuration to file "{KUBELET_DIR}/config.yaml"\n')
        write_file(hp(f"{KUBELET_DIR}/config.yaml"), dump(kubelet_config_doc(cfg)))
        out.write("[kubelet-start] Starting the kubelet\n")
        rc, msg = systemctl("restart", "kubelet")
        if rc:
            out.write(f"[kubelet-start] WARNING: unable to start the kubelet service: [{msg.strip()}]\n"
                      "[kubelet-start] Please ensure kubelet is reloaded and running manually.\n")  # fmt: skip

    phase("kubelet-start", kubelet_start)

    def control_plane() -> None:
        write_file(hp(f"/etc/systemd/system/{APISERVER_UNIT}"), apiserver_unit(self_path()))
        systemctl("daemon-reload")
        out.write(f'[control-plane] Using manifest folder "{MANIFESTS}"\n')
        pods = control_plane_manifests(cfg)
        for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            out.write(f'[control-plane] Creating static Pod manifest for "{n}"\n')
            write_file(hp(f"{MANIFESTS}/{n}.yaml"), dump(pods[n]), 0o600)
        if "etcd" in pods:
            out.write(f'[etcd] Creating static Pod manifest for local etcd in "{MANIFESTS}"\n')
            write_file(hp(f"{MANIFESTS}/etcd.yaml"), dump(pods["etcd"]), 0o600)
            os.makedirs(hp(cfg.cluster["etcd"]["local"]["dataDir"] + "/member"), mode=0o700, exist_ok=True)

    phase("control-plane", control_plane)
    client = admin_client()

    def wait_control_plane() -> None:
        limit = parse_duration(cfg.cluster["apiServer"]["timeoutForControlPlane"])
        out.write(f'[wait-control-plane] Waiting for the kubelet to boot up the control plane as static Pods from '
                  f'directory "{MANIFESTS}". This can take up to {format_duration(limit)}\n')  # fmt: skip
        out.flush()
        start, warned = now(), False
        while now() - start < limit:
            try:
                if client.raw("GET", "/healthz")[0] == 200:
                    out.write(
                        f"[apiclient] All control plane components are healthy after {now() - start:.6f} seconds\n"
                    )
                    return
            except Unreachable:
                pass
            if not warned and now() - start > 40:
                warned = True
                out.write("[kubelet-check] Initial timeout of 40s passed.\n")
                if not kubelet_healthy():
                    kubelet_check_messages(out)
                out.flush()
            time.sleep(0.5)
        out.write(KUBELET_TROUBLE)
        raise Fail("couldn't initialize a Kubernetes cluster")

    phase("wait-control-plane", wait_control_plane)

    def upload_config() -> None:
        out.write(
            '[upload-config] Storing the configuration used in ConfigMap "kubeadm-config" in the "kube-system" Namespace\n'
        )
        post_obj(client, {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
                          "data": {"ClusterConfiguration": dump(cfg.cluster)}})  # fmt: skip
        out.write(f'[kubelet] Creating a ConfigMap "{KUBELET_CONFIG_CM}" in namespace kube-system with the '
                  "configuration for the kubelets in the cluster\n")  # fmt: skip
        out.write(f'NOTE: The "{KUBELET_CONFIG_CM}" naming of the kubelet ConfigMap is deprecated. Once the '
                  "UnversionedKubeletConfigMap feature gate graduates to Beta the default name will become just "
                  '"kubelet-config". Kubeadm upgrade will handle this transition transparently.\n')  # fmt: skip
        post_obj(client, {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": KUBELET_CONFIG_CM, "namespace": "kube-system"},
                          "data": {"kubelet": dump(kubelet_config_doc(cfg))}})  # fmt: skip
        out.write("[upload-certs] Skipping phase. Please see --upload-certs\n")

    phase("upload-config", upload_config)

    def mark_control_plane() -> None:
        labels = ["node-role.kubernetes.io/master", "node-role.kubernetes.io/control-plane",
                  "node.kubernetes.io/exclude-from-external-load-balancers"]  # fmt: skip
        taints = nr["taints"] or []
        out.write(f"[mark-control-plane] Marking the node {cfg.node_name} as control-plane by adding the labels: "
                  "[node-role.kubernetes.io/master(deprecated) node-role.kubernetes.io/control-plane "
                  "node.kubernetes.io/exclude-from-external-load-balancers]\n")  # fmt: skip
        if taints:
            ts = " ".join(
                f"{t['key']}{'=' + t['value'] if t.get('value') else ''}:{t['effect']}" for t in taints
            )
            out.write(
                f"[mark-control-plane] Marking the node {cfg.node_name} as control-plane by adding the taints [{ts}]\n"
            )
        out.flush()
        path = res_path("", "v1", "nodes", name=cfg.node_name)

        def patch() -> bool:  # the kubelet registers the Node; kubeadm only patches it
            node = client.get(path)
            md = node["metadata"]
            md.setdefault("labels", {}).update({k: "" for k in labels})
            md.setdefault("annotations", {})["kubeadm.alpha.kubernetes.io/cri-socket"] = cfg.cri_socket
            have = node.setdefault("spec", {}).setdefault("taints", [])
            for t in taints:
                if not any(h["key"] == t["key"] and h["effect"] == t["effect"] for h in have):
                    have.append(t)
            client.call("PUT", path, node)
            return True

        if not wait_for(patch, 120, 0.5):
            raise Fail("timed out waiting for the condition")

    phase("mark-control-plane", mark_control_plane)
    tokens = [bt["token"] for bt in cfg.init["bootstrapTokens"]]

    def bootstrap_token() -> None:
        out.write(f"[bootstrap-token] Using token: {tokens[0]}\n")
        out.write("[bootstrap-token] Configuring bootstrap tokens, cluster-info ConfigMap, RBAC Roles\n")
        for bt in cfg.init["bootstrapTokens"]:
            post_obj(client, token_secret_object(bt["token"], parse_duration(str(bt["ttl"])),
                                                 bt.get("description", ""), ",".join(bt["groups"])))  # fmt: skip
        for line in ("allow Node Bootstrap tokens to get nodes",
                     "allow Node Bootstrap tokens to post CSRs in order for nodes to get long term certificate credentials",
                     "allow the csrapprover controller automatically approve CSRs from a Node Bootstrap Token",
                     "allow certificate rotation for all node client certificates in the cluster"):  # fmt: skip
            out.write(f"[bootstrap-token] configured RBAC rules to {line}\n")
        out.write('[bootstrap-token] Creating the "cluster-info" ConfigMap in the "kube-public" namespace\n')
        ca = read_text(hp(f"{PKI}/ca.crt")) or ""
        post_obj(client, {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "cluster-info", "namespace": "kube-public"},
                          "data": {"kubeconfig": cluster_info_kubeconfig(f"https://{cfg.endpoint}", ca)}})  # fmt: skip

    phase("bootstrap-token", bootstrap_token)
    out.write(
        f'[kubelet-finalize] Updating "{K8S}/kubelet.conf" to point to a rotatable kubelet client certificate and key\n'
    )

    def addons() -> None:
        for obj in addon_objects(cfg):
            with contextlib.suppress(ApiError):
                post_obj(client, obj)
        if "addon/coredns" not in skip:
            out.write("[addons] Applied essential addon: CoreDNS\n")
        if "addon/kube-proxy" not in skip:
            out.write("[addons] Applied essential addon: kube-proxy\n")

    phase("addons", addons)
    out.write(INIT_SUCCESS)
    if not flags.get("skip-token-print"):
        out.write(join_command(cfg.endpoint, tokens[0], read_text(hp(f"{PKI}/ca.crt")) or "", False) + "\n")
    return 0


INIT_SUCCESS = """
Your Kubernetes control-plane has initialized successfully!

To start using your cluster, you need to run the following as a regular user:

  mkdir -p $HOME/.kube
  sudo cp -i /etc/kubernetes/admin.conf $HOME/.kube/config
  sudo chown $(id -u):$(id -g) $HOME/.kube/config

Alternatively, if you are the root user, you can run:

  export KUBECONFIG=/etc/kubernetes/admin.conf

You should now deploy a pod network to the cluster.
Run "kubectl apply -f [podnetwork].yaml" with one of the options listed at:
  https://kubernetes.io/docs/concepts/cluster-administration/addons/

Then you can join any number of worker nodes by running the following on each as root:

"""


def addon_objects(cfg: InitConfig) -> list[dict]:
    """CoreDNS and kube-proxy as API objects (nothing runs them: no pods in the stand-in)."""
    dns_img = control_plane_images(cfg)[-1]
    proxy_img = f"{cfg.repo}/kube-proxy:{cfg.version}"
    ks = {"namespace": "kube-system"}
    net = cfg.cluster["networking"]
    dns_lbl = {"k8s-app": "kube-dns"}
    proxy_cfg = cfg.kube_proxy or {"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
                                   "clusterCIDR": net.get("podSubnet", ""), "mode": ""}  # fmt: skip
    corefile = (f".:53 {{\n    errors\n    health\n    kubernetes {net['dnsDomain']} in-addr.arpa ip6.arpa {{\n"
                "       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n    }\n    forward . /etc/resolv.conf\n"
                "    cache 30\n    loop\n    reload\n    loadbalance\n}\n")  # fmt: skip
    ports = [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
             {"name": "metrics", "port": 9153, "protocol": "TCP"}]  # fmt: skip
    dns_tpl = {"metadata": {"labels": dns_lbl},
               "spec": {"containers": [{"name": "coredns", "image": dns_img}], "serviceAccountName": "coredns",
                        "priorityClassName": "system-cluster-critical",
                        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                                        {"effect": "NoSchedule", "key": "node-role.kubernetes.io/master"}]}}  # fmt: skip
    proxy_tpl = {"metadata": {"labels": {"k8s-app": "kube-proxy"}},
                 "spec": {"containers": [{"name": "kube-proxy", "image": proxy_img}], "hostNetwork": True,
                          "tolerations": [{"operator": "Exists"}], "serviceAccountName": "kube-proxy",
                          "nodeSelector": {"kubernetes.io/os": "linux"}}}  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", **ks}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", **ks}, "data": {"Corefile": corefile}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", "labels": dns_lbl, **ks},
         "spec": {"replicas": 2, "selector": {"matchLabels": dns_lbl}, "template": dns_tpl}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "labels": dns_lbl, **ks},
         "spec": {"clusterIP": first_ip(net["serviceSubnet"], 10), "selector": dns_lbl, "ports": ports,
                  "type": "ClusterIP"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kube-proxy", **ks}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-proxy", **ks},
         "data": {"config.conf": dump(proxy_cfg)}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet",
         "metadata": {"name": "kube-proxy", "labels": {"k8s-app": "kube-proxy"}, **ks},
         "spec": {"selector": {"matchLabels": {"k8s-app": "kube-proxy"}}, "template": proxy_tpl}},
    ]  # fmt: skip


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

    def preflight() -> None:
        out.write("[preflight] Running pre-flight checks\n")
        out.flush()
        root_check(ignore)
        run_checks(join_checks(node, cri), ignore)
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
                f"unable to fetch the kubeadm-config ConfigMap: {getattr(e, 'message', None) or e}"
            ) from e
        state["kubelet_cfg"] = kcm["data"]["kubelet"]
        state["cluster_cfg"] = yaml.safe_load(ccm["data"]["ClusterConfiguration"]) or {}
        state["boot"] = boot

    phase("preflight", preflight)

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
    out.write(JOIN_SUCCESS)
    return 0


JOIN_SUCCESS = """
This node has joined the cluster:
* Certificate signing request was sent to apiserver and a response was received.
* The Kubelet was informed of the new secure connection details.

Run 'kubectl get nodes' on the control-plane to see this node join the cluster.

"""


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
        systemctl("stop", APISERVER_UNIT)
        os.remove(hp(f"/etc/systemd/system/{APISERVER_UNIT}"))
        systemctl("daemon-reload")
    if not is_cp:
        out.write("[reset] No etcd config found. Assuming external etcd\n"
                  "[reset] Please, manually reset etcd to prevent further issues\n")  # fmt: skip
    dirs = [MANIFESTS, PKI]
    out.write(f"[reset] Deleting contents of config directories: [{' '.join(dirs)}]\n")
    files = [f"{K8S}/{n}" for n in ("admin.conf", "kubelet.conf", "bootstrap-kubelet.conf", "controller-manager.conf",
                                     "scheduler.conf")]  # fmt: skip
    out.write(f"[reset] Deleting files: [{' '.join(files)}]\n")
    stateful = ["/var/lib/etcd", KUBELET_DIR, "/var/lib/dockershim", "/var/run/kubernetes", "/var/lib/cni"]
    out.write(f"[reset] Deleting contents of stateful directories: [{' '.join(stateful)}]\n")
    for d in dirs + stateful + [STATE_DIR]:  # STATE_DIR is the stand-in's etcd
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
    """upgrade.EnforceVersionPolicies (1.23): one minor at a time, never above kubeadm without --force."""
    cv, tv, kv = parse_version(cluster), parse_version(target), parse_version(VERSION)
    if cv is None or kv is None or tv is None:
        raise Fail(f'[upgrade/version] FATAL: couldn\'t parse version "{target}"')
    mandatory, skippable = [], []
    if tv[:2] > (cv[0], cv[1] + 1):
        mandatory.append(f'Specified version to upgrade to "{target}" is too high; kubeadm can upgrade only 1 minor '
                         "version at a time")  # fmt: skip
    if tv[:2] < (cv[0], cv[1] - 1):
        mandatory.append(f'Specified version to downgrade to "{target}" is too low; kubeadm can downgrade only 1 minor '
                         "version at a time")  # fmt: skip
    if tv < MIN_CONTROL_PLANE:
        mandatory.append(f'Specified version to upgrade to "{target}" is equal to or lower than the minimum supported '
                         f'version "v{".".join(map(str, MIN_CONTROL_PLANE))}". Please specify a higher version to upgrade to')  # fmt: skip
    if tv > kv:
        skippable.append(f'Specified version to upgrade to "{target}" is higher than the kubeadm version "{VERSION}". '
                         "Upgrade kubeadm first using the tool you used to install kubeadm")  # fmt: skip
    if mandatory:
        raise Fail("[upgrade/version] FATAL: the --version argument is invalid due to these fatal errors:\n\n"
                   + "".join(f"\t- {m}\n" for m in mandatory)
                   + "\nPlease fix the misalignments highlighted above and try upgrading again")  # fmt: skip
    if skippable and not force:
        raise Fail("[upgrade/version] FATAL: the --version argument is invalid due to these errors:\n\n"
                   + "".join(f"\t- {m}\n" for m in skippable) + "\nCan be bypassed if you pass the --force flag")  # fmt: skip
    return skippable


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
        if not os.path.exists(hp(f"{MANIFESTS}/kube-apiserver.yaml")):
            out.write(
                "[preflight] Running pre-flight checks\n[preflight] Skipping prepull. Not a control plane node.\n"
            )
            out.write("[upgrade] Skipping phase. Not a control plane node.\n")
        kcm = client.get(res_path("", "v1", "configmaps", "kube-system", KUBELET_CONFIG_CM))
        write_file(hp(f"{KUBELET_DIR}/config.yaml"), kcm["data"]["kubelet"])
        out.write(f'[kubelet-start] Writing kubelet configuration to file "{KUBELET_DIR}/config.yaml"\n')
        out.write("[upgrade] The configuration for this node was successfully updated!\n")
        out.write(
            "[upgrade] Now you should go ahead and upgrade the kubelet package using your package manager.\n"
        )
        return 0
    out.write("[preflight] Running pre-flight checks.\n[upgrade] Running cluster health checks\n")
    if sub == "plan":
        out.write("[upgrade] Fetching available versions to upgrade to\n")
        out.write(
            f"[upgrade/versions] Cluster version: {cur}\n[upgrade/versions] kubeadm version: {VERSION}\n"
        )
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
    if len(pos) < 2:
        raise Fail("[upgrade/version] FATAL: missing version argument; use `kubeadm upgrade apply <version>`")
    target = "v" + pos[1].lstrip("v")
    out.write(f'[upgrade/version] You have chosen to change the cluster version to "{target}"\n')
    out.write(f"[upgrade/versions] Cluster version: {cur}\n[upgrade/versions] kubeadm version: {VERSION}\n")
    soft = version_policy(cur, target, bool(flags.get("force")))
    if soft:
        out.write(f"[upgrade/version] Found {len(soft)} potential version compatibility errors but skipping since the "
                  "--force flag is set: \n\n" + "".join(f"\t- {m}\n" for m in soft))  # fmt: skip
    if not (flags.get("yes") or flags.get("force")):
        out.write("[upgrade/confirm] Are you sure you want to proceed with the upgrade? [y/N]: ")
        out.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            raise Fail("won't proceed; the user didn't answer (Y|y) in order to continue")
    ccfg["kubernetesVersion"] = target
    cm["data"]["ClusterConfiguration"] = dump(ccfg)
    client.call("PUT", res_path("", "v1", "configmaps", "kube-system", "kubeadm-config"), cm)
    for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        p = hp(f"{MANIFESTS}/{n}.yaml")
        doc = yaml.safe_load(read_text(p) or "{}") or {}
        for c in (doc.get("spec") or {}).get("containers") or []:
            c["image"] = re.sub(r":v[^:/]+$", f":{target}", c["image"])
        if doc:
            write_file(p, dump(doc), 0o600)
        out.write(f'[upgrade/staticpods] Component "{n}" upgraded successfully!\n')
    out.write(f'\n[upgrade/successful] SUCCESS! Your cluster was upgraded to "{target}". Enjoy!\n\n'
              "[upgrade/kubelet] Now that your control plane is upgraded, please proceed with upgrading your kubelets "
              "if you haven't already done so.\n")  # fmt: skip
    return 0


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


# --------------------------------------------------------------------------- kube-apiserver stand-in process

APISERVER_FLAGS = {
    "advertise-address", "allow-privileged", "authorization-mode", "client-ca-file", "enable-admission-plugins",
    "disable-admission-plugins", "enable-bootstrap-token-auth", "etcd-cafile", "etcd-certfile", "etcd-keyfile",
    "etcd-servers", "kubelet-client-certificate", "kubelet-client-key", "kubelet-preferred-address-types",
    "proxy-client-cert-file", "proxy-client-key-file", "requestheader-allowed-names", "requestheader-client-ca-file",
    "requestheader-extra-headers-prefix", "requestheader-group-headers", "requestheader-username-headers",
    "secure-port", "bind-address", "service-account-issuer", "service-account-key-file",
    "service-account-signing-key-file", "service-cluster-ip-range", "tls-cert-file", "tls-private-key-file",
    "oidc-issuer-url", "oidc-client-id", "oidc-username-claim", "oidc-username-prefix", "oidc-groups-claim",
    "oidc-groups-prefix", "oidc-ca-file", "oidc-required-claim", "oidc-signing-algs", "audit-log-path",
    "audit-policy-file", "audit-log-maxage", "audit-log-maxbackup", "audit-log-maxsize", "feature-gates",
    "runtime-config", "service-node-port-range", "encryption-provider-config", "profiling", "anonymous-auth",
    "event-ttl", "default-not-ready-toleration-seconds", "default-unreachable-toleration-seconds", "v",
    "max-requests-inflight", "max-mutating-requests-inflight", "tls-cipher-suites", "tls-min-version",
    "service-account-lookup", "endpoint-reconciler-type", "insecure-port", "kubelet-certificate-authority",
}  # fmt: skip


def pod_command_flags(manifest_path: str, binary: str, known: set[str]) -> dict[str, str]:
    text = read_text(manifest_path)
    if text is None:
        raise Fail(f"open {manifest_path}: no such file or directory")
    try:
        pod = yaml.safe_load(text)
        cmd = pod["spec"]["containers"][0]["command"]
    except (yaml.YAMLError, KeyError, IndexError, TypeError) as e:
        raise Fail(f"static pod manifest {manifest_path} is invalid: {e}") from e
    if not cmd or os.path.basename(cmd[0]) != binary:
        raise Fail(f'exec: "{cmd[0] if cmd else ""}": executable file not found in $PATH')
    flags = {}
    for a in cmd[1:]:
        if not a.startswith("--"):
            raise Fail(f'Error: unknown command "{a}" for "{binary}"')
        k, _, v = a[2:].partition("=")
        if k not in known:
            raise Fail(f"Error: unknown flag: --{k}")
        flags[k] = v
    return flags


def apiserver_main(argv: list[str]) -> int:
    manifest = argv[0] if argv else hp(f"{MANIFESTS}/kube-apiserver.yaml")
    try:
        f = pod_command_flags(manifest, "kube-apiserver", APISERVER_FLAGS)
        if f.get("oidc-issuer-url") or f.get("oidc-client-id"):
            if not (f.get("oidc-issuer-url") and f.get("oidc-client-id")):
                raise Fail("Error: [oidc-issuer-url and oidc-client-id should be specified together]")
            if not f["oidc-issuer-url"].startswith("https://"):
                raise Fail(f"Error: invalid authentication config: 'oidc-issuer-url' (\"{f['oidc-issuer-url']}\") has "
                           "invalid scheme (\"http\"), require 'https'")  # fmt: skip
            if f.get("oidc-ca-file") and not os.path.exists(hp(f["oidc-ca-file"])):
                raise Fail(f"Error: invalid authentication config: failed to read the oidc-ca-file: open "
                           f"{f['oidc-ca-file']}: no such file or directory")  # fmt: skip
        for k in ("tls-cert-file", "tls-private-key-file", "client-ca-file"):
            if not f.get(k) or not os.path.exists(hp(f[k])):
                raise Fail(f"Error: open {f.get(k, '')}: no such file or directory")
        cidr = ""
        with contextlib.suppress(Fail):
            cm = pod_command_flags(hp(f"{MANIFESTS}/kube-controller-manager.yaml"), "kube-controller-manager",
                                   _any_flag())  # fmt: skip
            if cm.get("allocate-node-cidrs") == "true":
                cidr = cm.get("cluster-cidr", "")
        ca = hp(f["client-ca-file"])
        srv, _ = serve_api(hp(STATE_DIR), hp(f["tls-cert-file"]), hp(f["tls-private-key-file"]), ca,
                           os.path.join(os.path.dirname(ca), "ca.key"), f.get("bind-address", "0.0.0.0"),
                           int(f.get("secure-port", "6443")), cidr)  # fmt: skip
    except Fail as e:
        log_klog("E", "run.go:74", f'"command failed" err="{e.message}"')
        return 1
    except OSError as e:
        log_klog("E", "run.go:74", f'"command failed" err="failed to listen on 0.0.0.0:6443: {e.strerror}"')
        return 1
    log_klog("I", "secure_serving.go:266", f"Serving securely on [::]:{srv.server_address[1]}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    srv.shutdown()
    return 0


class _any_flag(set):
    def __contains__(self, item: object) -> bool:
        return True


# --------------------------------------------------------------------------- kubelet

KUBELET_FLAGS = {
    "bootstrap-kubeconfig": "str", "kubeconfig": "str", "config": "str", "container-runtime": "str",
    "container-runtime-endpoint": "str", "image-service-endpoint": "str", "pod-infra-container-image": "str",
    "node-ip": "str", "hostname-override": "str", "node-labels": "str", "register-node": "bool",
    "register-with-taints": "str", "cgroup-driver": "str", "network-plugin": "str", "cni-bin-dir": "str",
    "cni-conf-dir": "str", "resolv-conf": "str", "fail-swap-on": "bool", "v": "str", "root-dir": "str",
    "cert-dir": "str", "provider-id": "str", "cloud-provider": "str", "runtime-request-timeout": "str",
    "max-pods": "str", "feature-gates": "str", "logtostderr": "bool", "version": "bool",
}  # fmt: skip
ALLOWED_NODE_LABELS = {
    "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type", "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone", "kubernetes.io/arch",
    "kubernetes.io/hostname", "kubernetes.io/os", "node.kubernetes.io/instance-type", "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
}  # fmt: skip


def kubelet_fail(msg: str) -> int:
    log_klog("E", "run.go:74", f'"command failed" err="{msg}"')
    return 1


def check_node_labels(labels: dict[str, str]) -> str | None:
    bad = []
    for k in labels:
        ns = k.split("/")[0] if "/" in k else ""
        if not (
            ns == "kubernetes.io" or ns.endswith(".kubernetes.io") or ns == "k8s.io" or ns.endswith(".k8s.io")
        ):
            continue
        if k in ALLOWED_NODE_LABELS or ns in ("kubelet.kubernetes.io", "node.kubernetes.io") or \
                ns.endswith((".kubelet.kubernetes.io", ".node.kubernetes.io")):  # fmt: skip
            continue
        bad.append(k)
    if not bad:
        return None
    return (f"failed to validate kubelet flags: unknown 'kubernetes.io' or 'k8s.io' labels specified with "
            f"--node-labels: [{' '.join(sorted(bad))}]\n--node-labels in the 'kubernetes.io' namespace must begin with "
            "an allowed prefix (kubelet.kubernetes.io, node.kubernetes.io) or be in the specifically allowed set "
            f"({', '.join(sorted(ALLOWED_NODE_LABELS))})")  # fmt: skip


def kv_list(s: str) -> dict[str, str]:
    return dict(p.split("=", 1) if "=" in p else (p, "") for p in s.split(",") if p)


class Kubelet:
    def __init__(self, flags: dict[str, Any], cfg: dict) -> None:
        self.flags = flags
        self.cfg = cfg
        self.node = (flags.get("hostname-override") or hostname()).lower()
        self.cri = flags.get("container-runtime-endpoint") or DEFAULT_CRI_SOCKET
        self.kubeconfig = hp(flags.get("kubeconfig", f"{K8S}/kubelet.conf"))
        self.client: ApiClient | None = None
        self.registered = False
        self.static_mtime: float | None = None
        self.transitions: dict[str, tuple[str, str]] = {}

    def tls_bootstrap(self) -> None:
        boot = Credentials.from_kubeconfig(load_kubeconfig(hp(self.flags["bootstrap-kubeconfig"])))
        pki = hp(f"{KUBELET_DIR}/pki")
        key = f"{pki}/kubelet-client.key.tmp"
        gen_key(key, ec=True)
        csr = make_csr(key, f"system:node:{self.node}", ["system:nodes"])
        obj = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
               "metadata": {"name": f"csr-{secrets.token_hex(3)}"},
               "spec": {"request": b64(csr), "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                        "usages": ["digital signature", "key encipherment", "client auth"]}}  # fmt: skip
        client = ApiClient(boot)
        res = client.call("POST", res_path("certificates.k8s.io", "v1", "certificatesigningrequests"), obj)
        cert = base64.b64decode(res["status"]["certificate"]).decode()
        stamp = dt.datetime.now().strftime("%Y-%m-%d-%H-%M-%S")
        pem = f"{pki}/kubelet-client-{stamp}.pem"
        write_file(pem, cert + (read_text(key) or ""), 0o600)
        os.remove(key)
        cur = f"{pki}/kubelet-client-current.pem"
        with contextlib.suppress(OSError):
            os.remove(cur)
        os.symlink(pem, cur)
        doc = {"apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": "default-context",
               "clusters": [{"name": "default-cluster", "cluster": {"certificate-authority-data": b64(boot.ca_pem or ""),
                                                                    "server": boot.server}}],
               "contexts": [{"name": "default-context", "context": {"cluster": "default-cluster", "namespace": "default",
                                                                    "user": "default-auth"}}],
               "users": [{"name": "default-auth", "user": {"client-certificate": f"{KUBELET_DIR}/pki/kubelet-client-current.pem",
                                                            "client-key": f"{KUBELET_DIR}/pki/kubelet-client-current.pem"}}]}  # fmt: skip
        write_file(self.kubeconfig, yaml.safe_dump(doc, default_flow_style=False), 0o600)
        log_klog(
            "I",
            "certificate_manager.go:270",
            "kubernetes.io/kube-apiserver-client-kubelet: Certificate issued",
        )

    def conditions(self) -> tuple[list[dict], str]:
        """(conditions, containerRuntimeVersion) from the real node state."""
        rc, out = ctr(self.cri, "version", timeout=10)
        runtime_ok = rc == 0 and "Server:" in out
        net_ok, net_msg = cni_ready()
        ccfg = containerd_config()
        kubelet_driver = self.cfg.get("cgroupDriver", "cgroupfs")
        swap = len([ln for ln in (read_text(hp("/proc/swaps")) or "").split("\n") if ln]) > 1
        reasons = []
        if not runtime_ok:
            reasons.append("container runtime is down")
        if not net_ok:
            reasons.append(
                f"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:{net_msg}"
            )
        if kubelet_driver != "systemd" or ccfg["systemd_cgroup"] is not True:
            reasons.append(f'standin: cgroup driver mismatch or not systemd (kubelet "{kubelet_driver}", containerd '
                           f'SystemdCgroup={str(ccfg["systemd_cgroup"]).lower()}): pods would fail to start')  # fmt: skip
        if swap and self.cfg.get("failSwapOn", True) is False:
            reasons.append("standin: swap is on")
        ts = rfc3339()
        spec = [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "False" if reasons else "True", "KubeletNotReady" if reasons else "KubeletReady",
             ", ".join(reasons) if reasons else "kubelet is posting ready status"),
        ]  # fmt: skip
        conds = []
        for typ, st, reason, msg in spec:
            prev = self.transitions.get(typ)
            if prev is None or prev[0] != st:
                self.transitions[typ] = (st, ts)
            conds.append({"type": typ, "status": st, "reason": reason, "message": msg,
                          "lastHeartbeatTime": ts, "lastTransitionTime": self.transitions[typ][1]})  # fmt: skip
        return conds, f"containerd://{containerd_version(out)}" if runtime_ok else "containerd://unknown"

    def addresses(self) -> list[dict]:
        ip = self.flags.get("node-ip")
        if not ip and self.client is not None:
            with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((self.client.host, self.client.port))
                ip = s.getsockname()[0]
        out = [{"type": "InternalIP", "address": ip}] if ip else []
        return [*out, {"type": "Hostname", "address": self.node}]

    def status(self) -> dict:
        conds, rt = self.conditions()
        mem_ki = mem_total_mb() * 1024
        m = re.search(r"MemTotal:\s+(\d+) kB", read_text(hp("/proc/meminfo")) or "")
        if m:
            mem_ki = int(m.group(1))
        st = os.statvfs(hp(KUBELET_DIR)) if os.path.isdir(hp(KUBELET_DIR)) else None
        eph = f"{st.f_blocks * st.f_frsize // 1024}Ki" if st else "0"
        cap = {"cpu": str(num_cpu()), "memory": f"{mem_ki}Ki", "pods": str(self.cfg.get("maxPods", 110)),
               "ephemeral-storage": eph, "hugepages-1Gi": "0", "hugepages-2Mi": "0"}  # fmt: skip
        alloc = dict(cap, memory=f"{max(mem_ki - 102400, 0)}Ki")
        osr = read_text("/etc/os-release") or ""
        pretty = re.search(r'^PRETTY_NAME="?([^"\n]*)', osr, re.M)
        return {
            "conditions": conds, "addresses": self.addresses(), "capacity": cap, "allocatable": alloc,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": VERSION, "kubeProxyVersion": VERSION, "containerRuntimeVersion": rt,
                         "osImage": pretty.group(1) if pretty else "Linux", "kernelVersion": os.uname().release,
                         "operatingSystem": "linux", "architecture": "amd64",
                         "machineID": (read_text("/etc/machine-id") or "").strip(),
                         "systemUUID": (read_text("/sys/class/dmi/id/product_uuid") or "").strip(),
                         "bootID": (read_text("/proc/sys/kernel/random/boot_id") or "").strip()},
        }  # fmt: skip

    def register(self) -> None:
        assert self.client is not None
        labels = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux"}  # fmt: skip
        labels.update(kv_list(self.flags.get("node-labels", "")))
        taints = []
        for t in [t for t in self.flags.get("register-with-taints", "").split(",") if t]:
            kv, _, eff = t.partition(":")
            k, _, v = kv.partition("=")
            taints.append({"key": k, "effect": eff, **({"value": v} if v else {})})
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.node, "labels": labels,
                             "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                             "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
                "spec": {"taints": taints} if taints else {}, "status": self.status()}  # fmt: skip
        try:
            self.client.call("POST", res_path("", "v1", "nodes"), node)
            log_klog("I", "kubelet_node_status.go:76", f'"Successfully registered node" node="{self.node}"')
        except ApiError as e:
            if e.code != 409:
                raise
        self.registered = True

    def heartbeat(self) -> None:
        assert self.client is not None
        path = res_path("", "v1", "nodes", name=self.node)
        try:
            node = self.client.get(path)
        except ApiError as e:
            log_klog(
                "E",
                "kubelet_node_status.go:460",
                f'"Error updating node status, will retry" err="error getting node \\"{self.node}\\": {e.message}"',
            )
            return
        node["status"] = self.status()
        node["metadata"].pop("resourceVersion", None)
        self.client.call("PUT", path + "/status", node)

    def sync_static_pods(self) -> None:
        """The apiserver static pod: its manifest drives the stand-in unit like the kubelet drives a pod."""
        manifest = os.path.join(hp(self.cfg.get("staticPodPath", MANIFESTS)), "kube-apiserver.yaml")
        if not os.path.exists(hp(f"/etc/systemd/system/{APISERVER_UNIT}")):
            return
        try:
            mtime: float | None = os.stat(manifest).st_mtime
        except OSError:
            mtime = None
        active = systemctl("is-active", "--quiet", APISERVER_UNIT)[0] == 0
        if mtime is None:
            if active:
                systemctl("stop", APISERVER_UNIT)
        elif not active or mtime != self.static_mtime:
            if self.static_mtime is not None and mtime != self.static_mtime:
                log_klog(
                    "I",
                    "kubelet.go:2103",
                    '"SyncLoop UPDATE" source="file" pods=[kube-system/kube-apiserver]',
                )
            systemctl("restart", APISERVER_UNIT)
        self.static_mtime = mtime


def _serve_text(port: int, bind: str, code: int, body: bytes) -> http.server.ThreadingHTTPServer:
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer((bind, port), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def kubelet_main(argv: list[str]) -> int:
    try:
        flags, _ = parse_flags(argv, KUBELET_FLAGS)
    except Fail as e:
        sys.stderr.write(f"Error: {e.message}\n")
        return 1
    if flags.get("version"):
        print(f"Kubernetes {VERSION}")
        return 0
    cfg_path = flags.get("config", "")
    text = read_text(hp(cfg_path)) if cfg_path else ""
    if cfg_path and text is None:
        return kubelet_fail(f"failed to load kubelet config file, error: failed to load Kubelet config file {cfg_path}, "
                            f'error failed to read kubelet config file \\"{cfg_path}\\", error: open {cfg_path}: no such '
                            f"file or directory, path: {cfg_path}")  # fmt: skip
    try:
        cfg = yaml.safe_load(text or "") or {}
    except yaml.YAMLError as e:
        return kubelet_fail(f"failed to load kubelet config file, error: {e}, path: {cfg_path}")
    if cfg and (
        cfg.get("kind") != "KubeletConfiguration" or cfg.get("apiVersion") != "kubelet.config.k8s.io/v1beta1"
    ):
        return kubelet_fail(f"failed to load kubelet config file, error: failed to decode: no kind \\\"{cfg.get('kind')}\\\" "
                            f"is registered for version \\\"{cfg.get('apiVersion')}\\\", path: {cfg_path}")  # fmt: skip
    if "fail-swap-on" in flags:
        cfg["failSwapOn"] = flags["fail-swap-on"]
    if flags.get("cgroup-driver"):
        cfg["cgroupDriver"] = flags["cgroup-driver"]
    bad = check_node_labels(kv_list(flags.get("node-labels", "")))
    if bad:
        return kubelet_fail(bad)
    swaps = [ln for ln in (read_text(hp("/proc/swaps")) or "").split("\n") if ln]
    if len(swaps) > 1 and cfg.get("failSwapOn", True):
        return kubelet_fail(f"failed to run Kubelet: running with swap on is not supported, please disable swap! or set "
                            f"--fail-swap-on flag to false. /proc/swaps contained: {swaps}")  # fmt: skip
    kl = Kubelet(flags, cfg)
    if not os.path.exists(kl.kubeconfig):
        bk = flags.get("bootstrap-kubeconfig")
        if not bk or not os.path.exists(hp(bk)):
            return kubelet_fail(
                f"failed to run Kubelet: unable to load bootstrap kubeconfig: stat {bk}: no such file or directory"
            )
        try:
            kl.tls_bootstrap()
        except (ApiError, Unreachable, Fail) as e:
            return kubelet_fail(f"failed to run Kubelet: unable to load bootstrap kubeconfig: cannot create certificate "
                                f"signing request: {getattr(e, 'message', None) or getattr(e, 'reason', e)}")  # fmt: skip
    rc, out = ctr(kl.cri, "version", timeout=10)
    if rc != 0 or "Server:" not in out:
        path = sock_path(kl.cri)
        return kubelet_fail(f'failed to run Kubelet: unable to determine runtime API version: rpc error: code = '
                            f'Unavailable desc = connection error: desc = \\"transport: Error while dialing dial unix '
                            f'{path}: connect: no such file or directory\\"')  # fmt: skip
    try:
        servers = [_serve_text(int(cfg.get("healthzPort", 10248)), cfg.get("healthzBindAddress", "127.0.0.1"), 200, b"ok"),
                   _serve_text(10250, "0.0.0.0", 401, b"Unauthorized")]  # fmt: skip
    except OSError as e:
        return kubelet_fail(
            f"failed to listen on 0.0.0.0:10250: listen tcp 0.0.0.0:10250: bind: {e.strerror}"
        )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    period = parse_duration(str(cfg.get("nodeStatusUpdateFrequency") or "10s")) or 10.0
    next_hb = 0.0
    while not stop.is_set():
        kl.sync_static_pods()
        try:
            if kl.client is None:
                kl.client = ApiClient(Credentials.from_kubeconfig(load_kubeconfig(kl.kubeconfig)))
            if flags.get("register-node", True) and not kl.registered:
                kl.register()
                next_hb = now() + period
            elif kl.registered and now() >= next_hb:
                kl.heartbeat()
                next_hb = now() + period
        except Unreachable as e:
            log_klog("E", "kubelet_node_status.go:92", f'"Unable to register node with API server" err="Post '
                     f'\\"{kl.client.creds.server if kl.client else ""}/api/v1/nodes\\": {e.reason}" node="{kl.node}"')  # fmt: skip
        except (ApiError, Fail) as e:
            log_klog("E", "kubelet.go:2424", f'"Error getting node" err="{getattr(e, "message", e)}"')
        stop.wait(1.0)
    for s in servers:
        s.shutdown()
    return 0


# --------------------------------------------------------------------------- jsonpath (kubectl subset)


def _jp_tokens(template: str) -> list[tuple[str, str]]:
    """Split a kubectl jsonpath template into ('text', s) and ('expr', s) parts."""
    out, i = [], 0
    while i < len(template):
        j = template.find("{", i)
        if j < 0:
            out.append(("text", template[i:]))
            break
        if j > i:
            out.append(("text", template[i:j]))
        depth, k = 0, j
        while k < len(template):
            if template[k] == "{":
                depth += 1
            elif template[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        if k >= len(template):
            raise Fail(f"error: error parsing jsonpath {template}, unclosed action")
        out.append(("expr", template[j + 1 : k].strip()))
        i = k + 1
    return out


def _jp_path(expr: str) -> list[tuple[str, Any]]:
    """Parse .a.b['c'][0][*][?(@.k=="v")] into steps."""
    steps: list[tuple[str, Any]] = []
    i = 0
    if expr.startswith("$"):
        i = 1
    while i < len(expr):
        c = expr[i]
        if c == ".":
            i += 1
            name = ""
            while i < len(expr) and expr[i] not in ".[":
                if expr[i] == "\\" and i + 1 < len(expr):
                    name += expr[i + 1]
                    i += 2
                    continue
                name += expr[i]
                i += 1
            if name == "*":
                steps.append(("all", None))
            elif name:
                steps.append(("field", name))
        elif c == "[":
            j = expr.index("]", i) if not expr.startswith("[?(", i) else expr.index(")]", i) + 1
            inner = expr[i + 1 : j]
            i = j + 1
            if inner == "*":
                steps.append(("all", None))
            elif inner.startswith("?("):
                m = re.match(r"\?\(@\.([\w.\-/\\]+)\s*(==|!=)\s*['\"]?([^'\"]*)['\"]?\)$", inner)
                if not m:
                    raise Fail(f"error: error parsing jsonpath {{{expr}}}, unsupported filter {inner}")
                steps.append(
                    ("filter", (m.group(1).replace("\\.", "\x00").split("."), m.group(2), m.group(3)))
                )
            elif inner[:1] in "'\"":
                steps.append(("field", inner[1:-1]))
            elif ":" in inner:
                a, _, b = inner.partition(":")
                steps.append(("slice", (int(a) if a else None, int(b) if b else None)))
            else:
                steps.append(("index", int(inner)))
        else:
            raise Fail(f"error: error parsing jsonpath {{{expr}}}, unrecognized character in action: {c!r}")
    return steps


def _jp_eval(values: list[Any], steps: list[tuple[str, Any]]) -> list[Any]:
    for kind, arg in steps:
        nxt: list[Any] = []
        for v in values:
            if kind == "field" and isinstance(v, dict) and arg in v:
                nxt.append(v[arg])
            elif kind == "all":
                nxt.extend(v.values() if isinstance(v, dict) else v if isinstance(v, list) else [])
            elif kind == "index" and isinstance(v, list) and -len(v) <= arg < len(v):
                nxt.append(v[arg])
            elif kind == "slice" and isinstance(v, list):
                nxt.extend(v[arg[0] : arg[1]])
            elif kind == "filter" and isinstance(v, list):
                keys, op, want = arg
                for item in v:
                    got = item
                    for k in keys:
                        got = got.get(k.replace("\x00", ".")) if isinstance(got, dict) else None
                    sval = got if isinstance(got, str) else json.dumps(got) if got is not None else None
                    if (sval == want) == (op == "=="):
                        nxt.append(item)
        values = nxt
    return values


def _jp_text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return go_json(v)
    return "" if v is None else str(v)


def jsonpath(template: str, data: Any) -> str:
    """kubectl -o jsonpath (allow-missing-template-keys=true): fields, [*], [n], filters, range/end, literals."""
    toks = _jp_tokens(template)

    def render(toks: list[tuple[str, str]], ctx: Any) -> str:
        out, i = [], 0
        while i < len(toks):
            kind, s = toks[i]
            if kind == "text":
                out.append(s)
            elif s.startswith("range "):
                depth, j = 1, i + 1
                while j < len(toks) and depth:
                    if toks[j][0] == "expr" and toks[j][1].startswith("range "):
                        depth += 1
                    elif toks[j] == ("expr", "end"):
                        depth -= 1
                    j += 1
                body = toks[i + 1 : j - 1]
                for item in _jp_eval([ctx], _jp_path(s[6:].strip())):
                    out.append(render(body, item))
                i = j
                continue
            elif s[:1] in "'\"":
                out.append(s[1:-1].encode().decode("unicode_escape"))
            elif s in ("@", "."):
                out.append(_jp_text(ctx))
            else:
                out.append(" ".join(_jp_text(v) for v in _jp_eval([ctx], _jp_path(s.removeprefix("@")))))
            i += 1
        return "".join(out)

    return render(toks, data)


# --------------------------------------------------------------------------- kubectl

KUBECTL_FLAGS = {
    "kubeconfig": "str", "namespace": "str", "all-namespaces": "bool", "output": "str", "selector": "str",
    "overwrite": "bool", "all": "bool", "ignore-daemonsets": "bool", "delete-emptydir-data": "bool",
    "delete-local-data": "bool", "force": "bool", "timeout": "str", "for": "str", "filename": "list", "raw": "str",
    "client": "bool", "short": "bool", "grace-period": "str", "ignore-not-found": "bool", "dry-run": "str",
    "validate": "str", "recursive": "bool", "server-side": "bool", "field-manager": "str", "context": "str",
    "request-timeout": "str", "v": "str", "show-labels": "bool", "no-headers": "bool", "wait": "bool",
    "server": "str", "insecure-skip-tls-verify": "bool", "chunk-size": "str", "disable-eviction": "bool",
    "skip-wait-for-delete-timeout": "str", "pod-selector": "str", "save-config": "bool", "record": "bool",
}  # fmt: skip
KUBECTL_SHORT = {"n": "namespace", "A": "all-namespaces", "o": "output", "l": "selector", "f": "filename",
                 "R": "recursive", "v": "v"}  # fmt: skip
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class Kubectl:
    def __init__(self, flags: dict[str, Any]) -> None:
        self.flags = flags
        path = flags.get("kubeconfig")
        if not path:
            for p in (os.environ.get("KUBECONFIG") or "").split(":"):
                if p and os.path.exists(p):
                    path = p
                    break
        if not path and os.path.exists(os.path.expanduser("~/.kube/config")):
            path = os.path.expanduser("~/.kube/config")
        if path:
            creds = Credentials.from_kubeconfig(load_kubeconfig(path))
        else:  # no kubeconfig at all: kubectl's fallback
            creds = Credentials("http://localhost:8080")
        if flags.get("insecure-skip-tls-verify"):
            creds.insecure = True
        timeout = (
            parse_duration(flags["request-timeout"])
            if flags.get("request-timeout") not in (None, "0")
            else 30
        )
        self.client = ApiClient(creds, timeout=timeout)
        self.ns = flags.get("namespace") or "default"
        self.out = sys.stdout

    # ---- resource mapping
    def resolve(self, word: str) -> tuple[str, str, str, str, bool]:
        word_l = word.lower()
        name, _, grp = word_l.partition(".")
        cands = list(BUILTIN_RESOURCES)
        for r in cands + self._server_resources():
            if grp and r[0] != grp:
                continue
            if name in (r[3], r[2].lower(), *r[5]):
                return r[0], r[1], r[2], r[3], r[4]
        raise Fail(f'error: the server doesn\'t have a resource type "{word}"')

    def _server_resources(self) -> list[tuple]:
        out: list[tuple] = []
        known = {(r[0], r[1]) for r in BUILTIN_RESOURCES}
        for g in self.client.get("/apis").get("groups", []):
            for v in g.get("versions", []):
                if (g["name"], v["version"]) in known:
                    continue
                for r in self.client.get(f"/apis/{g['name']}/{v['version']}").get("resources", []):
                    out.append(
                        (
                            g["name"],
                            v["version"],
                            r["kind"],
                            r["name"],
                            r["namespaced"],
                            r.get("shortNames") or [],
                            "",
                        )
                    )
        return out

    def mapping_for(self, api_version: str, kind: str) -> tuple[str, str, str, bool] | None:
        g, v = group_of(api_version)
        for r in BUILTIN_RESOURCES:
            if (r[0], r[1], r[2]) == (g, v, kind):
                return g, v, r[3], r[4]
        if not g:
            return None
        try:
            lst = self.client.get(f"/apis/{g}/{v}")
        except ApiError:
            return None
        for r in lst.get("resources", []):
            if r["kind"] == kind:
                return g, v, r["name"], r["namespaced"]
        return None

    # ---- output
    def print_objects(self, objs: list[dict], res: tuple[str, str, str, str, bool], single: bool) -> None:
        fmt = self.flags.get("output", "")
        g, _v, kind, _plural, namespaced = res
        if fmt in ("json", "yaml") or fmt.startswith(("jsonpath", "go-template")):
            doc: Any = objs[0] if single else {"apiVersion": "v1", "items": objs, "kind": "List",
                                               "metadata": {"resourceVersion": "", "selfLink": ""}}  # fmt: skip
            if fmt == "json":
                self.out.write(json.dumps(doc, indent=4, sort_keys=True, ensure_ascii=False) + "\n")
            elif fmt == "yaml":
                self.out.write(yaml.safe_dump(doc, default_flow_style=False, sort_keys=True))
            elif fmt.startswith("jsonpath"):
                tmpl = fmt.split("=", 1)[1] if "=" in fmt else ""
                if fmt.startswith("jsonpath-as-json"):
                    self.out.write(json.dumps(_jp_eval([doc], _jp_path(tmpl.strip("{}"))), indent=4) + "\n")
                else:
                    self.out.write(jsonpath(tmpl, doc))
            else:
                raise Fail("error: standin: go-template output is not supported")
            return
        if fmt == "name":
            for o in objs:
                self.out.write(f"{kind.lower()}{'.' + g if g else ''}/{o['metadata']['name']}\n")
            return
        if fmt not in ("", "wide"):
            raise Fail(f'error: unable to match a printer suitable for the output format "{fmt}", allowed formats are: '
                       "custom-columns,custom-columns-file,go-template,go-template-file,json,jsonpath,jsonpath-as-json,"
                       "jsonpath-file,name,template,templatefile,wide,yaml")  # fmt: skip
        if not objs:
            where = f" in {self.ns} namespace" if namespaced and not self.flags.get("all-namespaces") else ""
            sys.stderr.write(f"No resources found{where}.\n")
            return
        header, rows = table_rows(kind, objs, fmt == "wide")
        if self.flags.get("show-labels"):
            header.append("LABELS")
            for r, o in zip(rows, objs, strict=True):
                lab = o["metadata"].get("labels") or {}
                r.append(",".join(f"{k}={v}" for k, v in sorted(lab.items())) or "<none>")
        if self.flags.get("all-namespaces") and namespaced:
            header.insert(0, "NAMESPACE")
            for r, o in zip(rows, objs, strict=True):
                r.insert(0, o["metadata"].get("namespace", ""))
        self.out.write(tabwrite(([] if self.flags.get("no-headers") else [header]) + rows))

    # ---- commands
    def cmd_get(self, args: list[str]) -> int:
        if self.flags.get("raw"):
            code, payload = self.client.raw("GET", self.flags["raw"])
            if code >= 400:
                doc = json.loads(payload or b"{}") if payload.startswith(b"{") else {}
                raise ApiError(code, doc.get("reason", "Unknown"), doc.get("message", payload.decode()))
            self.out.write(payload.decode())
            return 0
        if not args:
            raise Fail(
                'You must specify the type of resource to get. Use "kubectl api-resources" for a complete list of supported resources.'
            )
        if "/" in args[0]:
            word, name = args[0].split("/", 1)
            names = [name] + [a.split("/", 1)[1] for a in args[1:]]
        else:
            word, names = args[0], args[1:]
        res = self.resolve(word.split(",")[0])
        g, v, _kind, plural, namespaced = res
        ns = None if (self.flags.get("all-namespaces") and not names) else (self.ns if namespaced else None)
        if names:
            objs = []
            for n in names:
                objs.append(self.client.get(res_path(g, v, plural, ns, n)))
            self.print_objects(objs, res, single=len(names) == 1)
            return 0
        path = res_path(g, v, plural, ns)
        if self.flags.get("selector"):
            path += "?labelSelector=" + urllib.parse.quote(self.flags["selector"])
        objs = self.client.get(path)["items"]
        self.print_objects(objs, res, single=False)
        return 0

    def targets(self, args: list[str], default_kind: str | None = None) -> tuple[tuple, list[str], list[str]]:
        """TYPE NAME... [rest] or TYPE/NAME... -> (mapping, names, remaining args)."""
        if not args:
            raise Fail("error: You must provide one or more resources by argument or filename.")
        if "/" in args[0]:
            res = self.resolve(args[0].split("/")[0])
            names, rest = [], []
            for a in args:
                (names if "/" in a else rest).append(a.split("/", 1)[-1])
            return res, names, rest
        res = self.resolve(default_kind or args[0])
        rest = args if default_kind else args[1:]
        return res, rest[:1], rest[1:]

    def _obj_path(self, res: tuple, name: str) -> str:
        g, v, _, plural, namespaced = res
        return res_path(g, v, plural, self.ns if namespaced else None, name)

    def _ref(self, res: tuple, name: str) -> str:
        return f"{res[2].lower()}{'.' + res[0] if res[0] else ''}/{name}"

    def cmd_label(self, args: list[str], field: str = "labels", verb: str = "labeled") -> int:
        res, names, changes = self.targets(args)
        if self.flags.get("all") and not names:
            names = [
                o["metadata"]["name"] for o in self.client.get(self._obj_path(res, "").rstrip("/"))["items"]
            ]
        if not names:
            raise Fail(
                "error: one or more resources must be specified as <resource> <name> or <resource>/<name>"
            )
        # with TYPE NAME form, further positionals may be names until the first k=v / k-
        while changes and not ("=" in changes[0] or changes[0].endswith("-")):
            names.append(changes.pop(0))
        if not changes:
            raise Fail(f"error: at least one {field[:-1]} update is required")
        add = dict(c.split("=", 1) for c in changes if "=" in c)
        remove = [c[:-1] for c in changes if "=" not in c and c.endswith("-")]
        for n in names:
            path = self._obj_path(res, n)
            obj = self.client.get(path)
            cur = obj["metadata"].setdefault(field, {}) or {}
            obj["metadata"][field] = cur
            if not self.flags.get("overwrite"):
                clash = [f"'{k}' already has a value ({cur[k]}), and --overwrite is false" for k, v in add.items()
                         if k in cur and cur[k] != v]  # fmt: skip
                if clash:
                    raise Fail("error: " + clash[0])
            before = dict(cur)
            for k in remove:
                if k not in cur:
                    self.out.write(f'{field[:-1]} "{k}" not found.\n')
                cur.pop(k, None)
            cur.update(add)
            if cur == before:
                self.out.write(f"{self._ref(res, n)} not {verb}\n")
                continue
            self.client.call("PUT", path, obj)
            msg = verb if add or not remove else "un" + verb
            self.out.write(f"{self._ref(res, n)} {msg}\n")
        return 0

    def cmd_taint(self, args: list[str]) -> int:
        if not args:
            raise Fail("error: at least one taint update is required")
        res, names, specs = self.targets(args)
        if res[3] != "nodes":
            raise Fail(f"error: invalid resource type {args[0]}, only node types are supported")
        if self.flags.get("all") and not names:
            names = [o["metadata"]["name"] for o in self.client.get("/api/v1/nodes")["items"]]
        if not specs:
            raise Fail("error: at least one taint update is required")
        add, remove = [], []
        for s in specs:
            rm = s.endswith("-")
            body = s[:-1] if rm else s
            kv, _, eff = body.partition(":")
            k, _, v = kv.partition("=")
            if eff and eff not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise Fail(f"error: invalid taint effect: {eff}, unsupported taint effect")
            if not rm and not eff:
                raise Fail(f"error: invalid taint spec: {s}, unknown taint spec")
            (remove if rm else add).append({"key": k, "effect": eff, **({"value": v} if v else {})})
        for n in names:
            path = res_path("", "v1", "nodes", name=n)
            node = self.client.get(path)
            taints = [
                t
                for t in node.setdefault("spec", {}).get("taints") or []
                if t["key"] not in CONTROLLER_TAINTS
            ]
            for r in remove:
                keep = [
                    t
                    for t in taints
                    if not (t["key"] == r["key"] and (not r["effect"] or t["effect"] == r["effect"]))
                ]
                if len(keep) == len(taints):
                    raise Fail(
                        f'error: taint "{r["key"]}{":" + r["effect"] if r["effect"] else ""}" not found'
                    )
                taints = keep
            for a in add:
                same = [t for t in taints if t["key"] == a["key"] and t["effect"] == a["effect"]]
                if same and not self.flags.get("overwrite"):
                    raise Fail(
                        f"error: node {n} already has {a['key']} taint(s) with same effect(s) and --overwrite is false"
                    )
                taints = [t for t in taints if t not in same] + [a]
            node["spec"]["taints"] = taints
            self.client.call("PUT", path, node)
            verb = "modified" if add and remove else "tainted" if add else "untainted"
            self.out.write(f"node/{n} {verb}\n")
        return 0

    def _cordon(self, name: str, on: bool) -> None:
        path = res_path("", "v1", "nodes", name=name)
        node = self.client.get(path)
        if bool(node.get("spec", {}).get("unschedulable")) == on:
            self.out.write(f"node/{name} already {'cordoned' if on else 'uncordoned'}\n")
            return
        node.setdefault("spec", {})["unschedulable"] = True if on else None
        if not on:
            node["spec"].pop("unschedulable")
        self.client.call("PUT", path, node)
        self.out.write(f"node/{name} {'cordoned' if on else 'uncordoned'}\n")

    def cmd_cordon(self, args: list[str], on: bool = True) -> int:
        _, names, rest = self.targets(args, "nodes")
        for n in names + rest:
            self._cordon(n, on)
        return 0

    def cmd_drain(self, args: list[str]) -> int:
        _, names, rest = self.targets(args, "nodes")
        for n in names + rest:
            self._cordon(n, True)
            ds_pods = [f"{d['metadata']['namespace']}/{d['metadata']['name']}-{hashlib.sha256((n + d['metadata']['name']).encode()).hexdigest()[:5]}"
                       for d in self.client.get("/apis/apps/v1/daemonsets")["items"]]  # fmt: skip
            if ds_pods and not self.flags.get("ignore-daemonsets"):
                msg = f"cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): {', '.join(ds_pods)}"
                sys.stderr.write(f'error: unable to drain node "{n}" due to error:{msg}, continuing command...\n'
                                 f"There are pending nodes to be drained:\n {n}\n{msg}\n")  # fmt: skip
                return 1
            if ds_pods:
                sys.stderr.write(f"WARNING: ignoring DaemonSet-managed Pods: {', '.join(ds_pods)}\n")
            for p in self.client.get("/api/v1/pods")["items"]:
                if (p.get("spec") or {}).get("nodeName") == n:
                    ns, pn = p["metadata"]["namespace"], p["metadata"]["name"]
                    self.out.write(f"evicting pod {ns}/{pn}\n")
                    self.client.call("DELETE", res_path("", "v1", "pods", ns, pn))
                    self.out.write(f"pod/{pn} evicted\n")
            self.out.write(f"node/{n} drained\n")
        return 0

    def read_manifests(self) -> list[tuple[str, dict | None, str | None]]:
        """(source, object, error) for every document of every -f."""
        out: list[tuple[str, dict | None, str | None]] = []
        files: list[str] = []
        for f in self.flags.get("filename", []):
            if f == "-":
                files.append(f)
            elif os.path.isdir(f):
                files += sorted(
                    os.path.join(f, n) for n in os.listdir(f) if n.endswith((".yaml", ".yml", ".json"))
                )
            elif os.path.exists(f):
                files.append(f)
            else:
                raise Fail(f'error: the path "{f}" does not exist')
        for f in files:
            text = sys.stdin.read() if f == "-" else read_text(f) or ""
            src = "STDIN" if f == "-" else f
            try:
                docs = [d for d in yaml.safe_load_all(text) if d is not None]
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                raise Fail(f'error: error parsing {src}: error converting YAML to JSON: yaml: '
                           f'{"line " + str(mark.line + 1) + ": " if mark else ""}{getattr(e, "problem", e)}') from e  # fmt: skip
            for d in docs:
                if (
                    isinstance(d, dict)
                    and d.get("kind", "").endswith("List")
                    and isinstance(d.get("items"), list)
                ):
                    out += [(src, i, None) for i in d["items"]]
                    continue
                miss = [
                    f"{k} not set" for k in ("apiVersion", "kind") if not isinstance(d, dict) or not d.get(k)
                ]
                if miss:
                    out.append((src, None, f'error validating "{src}": error validating data: [{", ".join(miss)}]; if '
                                "you choose to ignore these errors, turn validation off with --validate=false"))  # fmt: skip
                else:
                    out.append((src, d, None))
        if not out:
            raise Fail("error: no objects passed to apply")
        return out

    def cmd_apply(self, args: list[str]) -> int:
        if not self.flags.get("filename"):
            raise Fail("error: must specify one of -f and -k")
        rc = 0
        for src, obj, err in self.read_manifests():
            if err:
                sys.stderr.write(f"error: {err}\n")
                rc = 1
                continue
            assert obj is not None
            m = self.mapping_for(obj["apiVersion"], obj["kind"])
            if m is None:
                sys.stderr.write(f'error: unable to recognize "{src}": no matches for kind "{obj["kind"]}" in version '
                                 f'"{obj["apiVersion"]}"\n')  # fmt: skip
                rc = 1
                continue
            g, v, plural, namespaced = m
            md = obj.setdefault("metadata", {}) or {}
            obj["metadata"] = md
            name = md.get("name", "")
            ns = (md.get("namespace") or self.ns) if namespaced else None
            if not name:
                sys.stderr.write(f'error: error when retrieving current configuration of:\nResource: "{g + "/" if g else ""}'
                                 f'{v}, Resource={plural}", GroupVersionKind: "{g + "/" if g else ""}{v}, Kind={obj["kind"]}"\n'
                                 f'Name: "", Namespace: "{ns or ""}"\nfrom server for: "{src}": resource name may not be empty\n')  # fmt: skip
                rc = 1
                continue
            if ns:
                md["namespace"] = ns
            else:
                md.pop("namespace", None)
            manifest = copy.deepcopy(obj)
            md.setdefault("annotations", {})[LAST_APPLIED] = go_json(manifest) + "\n"
            ref = f"{obj['kind'].lower()}{'.' + g if g else ''}/{name}"
            path = res_path(g, v, plural, ns, name)
            try:
                try:
                    cur = self.client.get(path)
                except ApiError as e:
                    if e.code != 404:
                        raise
                    self.client.call("POST", res_path(g, v, plural, ns), obj)
                    self.out.write(f"{ref} created\n")
                    continue
                last = json.loads((cur["metadata"].get("annotations") or {}).get(LAST_APPLIED) or "{}")
                new = three_way(cur, last, obj)
                if new == cur:
                    self.out.write(f"{ref} unchanged\n")
                    continue
                self.client.call("PUT", path, new)
                self.out.write(f"{ref} configured\n")
            except ApiError as e:
                op = "creating" if e.code == 404 else "applying patch"
                sys.stderr.write(f'Error from server ({e.reason}): error when {op} "{src}": {e.message}\n')
                rc = 1
            finally:
                for w in self.client.warnings:
                    sys.stderr.write(f"Warning: {w}\n")
                self.client.warnings.clear()
        return rc

    def cmd_delete(self, args: list[str]) -> int:
        items: list[tuple[tuple, str, str | None]] = []
        if self.flags.get("filename"):
            for src, obj, err in self.read_manifests():
                if err or obj is None:
                    raise Fail(f"error: {err}")
                m = self.mapping_for(obj["apiVersion"], obj["kind"])
                if m is None:
                    raise Fail(f'error: unable to recognize "{src}": no matches for kind "{obj["kind"]}" in version '
                               f'"{obj["apiVersion"]}"')  # fmt: skip
                res = (m[0], m[1], obj["kind"], m[2], m[3])
                items.append((res, obj["metadata"]["name"], obj["metadata"].get("namespace") or self.ns))
        else:
            res, names, rest = self.targets(args)
            items = [(res, n, self.ns) for n in names + rest]
        rc = 0
        for res, n, ns in items:
            g, v, kind, plural, namespaced = res
            try:
                self.client.call("DELETE", res_path(g, v, plural, ns if namespaced else None, n))
                self.out.write(f'{kind.lower()}{"." + g if g else ""} "{n}" deleted\n')
            except ApiError as e:
                if e.code == 404 and self.flags.get("ignore-not-found"):
                    continue
                raise
        return rc

    def cmd_create(self, args: list[str]) -> int:
        if self.flags.get("filename"):
            for src, obj, err in self.read_manifests():
                if err or obj is None:
                    raise Fail(f"error: {err}")
                m = self.mapping_for(obj["apiVersion"], obj["kind"])
                if m is None:
                    raise Fail(
                        f'error: unable to recognize "{src}": no matches for kind "{obj["kind"]}" in version "{obj["apiVersion"]}"'
                    )
                ns = (obj["metadata"].get("namespace") or self.ns) if m[3] else None
                try:
                    self.client.call("POST", res_path(m[0], m[1], m[2], ns), obj)
                except ApiError as e:
                    raise ApiError(e.code, e.reason, f'error when creating "{src}": {e.message}') from e
                self.out.write(
                    f"{obj['kind'].lower()}{'.' + m[0] if m[0] else ''}/{obj['metadata']['name']} created\n"
                )
            return 0
        if len(args) >= 2 and args[0] in ("namespace", "ns"):
            self.client.call(
                "POST",
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": args[1]}},
            )
            self.out.write(f"namespace/{args[1]} created\n")
            return 0
        raise Fail(f"error: standin: kubectl create {' '.join(args[:1])} is not supported")

    def cmd_wait(self, args: list[str]) -> int:
        cond = self.flags.get("for", "")
        if not cond:
            raise Fail("error: --for must be set")
        timeout = parse_duration(self.flags.get("timeout", "30s"))
        if "/" in (args[0] if args else ""):
            res, names, _ = self.targets(args)
        else:
            res, names, rest = self.targets(args)
            names += rest
        g, v, kind, plural, namespaced = res
        ns = self.ns if namespaced else None
        if self.flags.get("all") or not names:
            names = [o["metadata"]["name"] for o in self.client.get(res_path(g, v, plural, ns))["items"]]
            if not names:
                raise Fail("error: no matching resources found")
        want_type, want_status = "", "true"
        if cond.startswith("condition="):
            want_type, _, want_status = cond[len("condition=") :].partition("=")
            want_status = (want_status or "true").lower()
        elif cond != "delete":
            raise Fail(f'error: unrecognized condition: "{cond}"')
        end = now() + timeout
        for n in names:
            while True:
                try:
                    obj = self.client.get(res_path(g, v, plural, ns, n))
                    if want_type and any(c.get("type", "").lower() == want_type.lower() and str(c.get("status")).lower()
                                         == want_status for c in (obj.get("status") or {}).get("conditions") or []):  # fmt: skip
                        self.out.write(f"{kind.lower()}{'.' + g if g else ''}/{n} condition met\n")
                        break
                except ApiError as e:
                    if e.code != 404:
                        raise
                    if cond == "delete":
                        self.out.write(f"{kind.lower()}{'.' + g if g else ''}/{n} condition met\n")
                        break
                if now() >= end:
                    raise Fail(f"error: timed out waiting for the condition on {qualified(plural, g)}/{n}")
                time.sleep(1)
        return 0

    def cmd_version(self, args: list[str]) -> int:
        info = version_info()
        fmt = self.flags.get("output", "")
        server = None
        if not self.flags.get("client"):
            try:
                server = self.client.get("/version")
            except (Unreachable, ApiError):
                server = None
        if fmt == "json":
            doc = {"clientVersion": info, **({"serverVersion": server} if server else {})}
            self.out.write(json.dumps(doc, indent=2) + "\n")
        elif fmt == "yaml":
            self.out.write(
                yaml.safe_dump({"clientVersion": info, **({"serverVersion": server} if server else {})})
            )
        elif self.flags.get("short"):
            self.out.write(
                f"Client Version: {VERSION}\n"
                + (f"Server Version: {server['gitVersion']}\n" if server else "")
            )
        else:

            def go(d):
                return (
                    "version.Info{" + ", ".join(f'{k[0].upper() + k[1:]}:"{v}"' for k, v in d.items()) + "}"
                )

            self.out.write(
                f"Client Version: {go(info)}\n" + (f"Server Version: {go(server)}\n" if server else "")
            )
        if not self.flags.get("client") and server is None:
            self.client.get("/version")  # raises the connection error like kubectl does
        return 0

    def cmd_cluster_info(self, args: list[str]) -> int:
        self.client.get("/version")
        self.out.write(
            f"\x1b[0;32mKubernetes control plane\x1b[0m is running at \x1b[0;33m{self.client.creds.server}\x1b[0m\n"
        )
        self.out.write("\nTo further debug and diagnose cluster problems, use 'kubectl cluster-info dump'.\n")
        return 0


def three_way(cur: Any, last: Any, new: Any) -> Any:
    """kubectl apply's 3-way merge, simplified: fields in `new` win, fields dropped since `last` go, others stay."""
    if not (isinstance(cur, dict) and isinstance(new, dict)):
        return copy.deepcopy(new)
    out = copy.deepcopy(cur)
    last = last if isinstance(last, dict) else {}
    for k, v in new.items():
        out[k] = three_way(out.get(k), last.get(k), v) if isinstance(v, dict) else copy.deepcopy(v)
    for k in last:
        if k not in new:
            out.pop(k, None)
    return out


def table_rows(kind: str, objs: list[dict], wide: bool) -> tuple[list[str], list[list[str]]]:
    def age(o: dict) -> str:
        ts = o["metadata"].get("creationTimestamp")
        return human_duration(now() - parse_rfc3339(ts)) if ts else "<unknown>"

    rows = []
    if kind == "Node":
        header = ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        if wide:
            header += ["INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"]
        for o in objs:
            st = o.get("status") or {}
            ready = next((c["status"] for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
            status = "Unknown" if ready is None else "Ready" if ready == "True" else "NotReady"
            if (o.get("spec") or {}).get("unschedulable"):
                status += ",SchedulingDisabled"
            labels = o["metadata"].get("labels") or {}
            roles = sorted({k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")}
                           | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set()))  # fmt: skip
            row = [o["metadata"]["name"], status, ",".join(roles) or "<none>", age(o),
                   (st.get("nodeInfo") or {}).get("kubeletVersion", "")]  # fmt: skip
            if wide:
                addr = {a["type"]: a["address"] for a in st.get("addresses") or []}
                ni = st.get("nodeInfo") or {}
                row += [addr.get("InternalIP", "<none>"), addr.get("ExternalIP", "<none>"), ni.get("osImage", ""),
                        ni.get("kernelVersion", ""), ni.get("containerRuntimeVersion", "")]  # fmt: skip
            rows.append(row)
        return header, rows
    specs: dict[str, tuple[list[str], Callable[[dict], list[str]]]] = {
        "Namespace": (["STATUS"], lambda o: [(o.get("status") or {}).get("phase", "Active")]),
        "ConfigMap": (["DATA"], lambda o: [str(len(o.get("data") or {}) + len(o.get("binaryData") or {}))]),
        "Secret": (["TYPE", "DATA"], lambda o: [o.get("type", "Opaque"), str(len(o.get("data") or {}))]),
        "ServiceAccount": (["SECRETS"], lambda o: [str(len(o.get("secrets") or []))]),
        "Service": (["TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)"], lambda o: [
            (o.get("spec") or {}).get("type", "ClusterIP"), (o.get("spec") or {}).get("clusterIP", "<none>"), "<none>",
            ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in (o.get("spec") or {}).get("ports") or []) or "<none>"]),
        "Deployment": (["READY", "UP-TO-DATE", "AVAILABLE"], lambda o: [
            f"{(o.get('status') or {}).get('readyReplicas', 0)}/{(o.get('spec') or {}).get('replicas', 1)}",
            str((o.get("status") or {}).get("updatedReplicas", 0)), str((o.get("status") or {}).get("availableReplicas", 0))]),
        "DaemonSet": (["DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR"], lambda o: [
            *(str((o.get("status") or {}).get(k, 0)) for k in ("desiredNumberScheduled", "currentNumberScheduled",
                                                               "numberReady", "updatedNumberScheduled", "numberAvailable")),
            ",".join(f"{k}={v}" for k, v in ((((o.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeSelector") or {}).items()) or "<none>"]),
    }  # fmt: skip
    extra_h, fn = specs.get(kind, ([], lambda o: []))
    header = ["NAME", *extra_h, "AGE"]
    for o in objs:
        rows.append([o["metadata"]["name"], *fn(o), age(o)])
    return header, rows


def kubectl_main(argv: list[str]) -> int:
    try:
        flags, pos = parse_flags(argv, KUBECTL_FLAGS, KUBECTL_SHORT)
    except Fail as e:
        sub = next((a for a in argv if not a.startswith("-")), "")
        sys.stderr.write(f"Error: {e.message}\nSee 'kubectl {sub + ' ' if sub else ''}--help' for usage.\n")
        return 1
    if not pos:
        print("kubectl controls the Kubernetes cluster manager (TEST-ONLY stand-in).")
        return 0
    sub, args = pos[0], pos[1:]
    if sub == "version" and flags.get("client"):
        return Kubectl.cmd_version(_client_only(flags), args)
    k = Kubectl(flags)
    table: dict[str, Callable[[list[str]], int]] = {
        "get": k.cmd_get, "label": k.cmd_label, "annotate": lambda a: k.cmd_label(a, "annotations", "annotated"),
        "taint": k.cmd_taint, "cordon": k.cmd_cordon, "uncordon": lambda a: k.cmd_cordon(a, False),
        "drain": k.cmd_drain, "apply": k.cmd_apply, "delete": k.cmd_delete, "create": k.cmd_create,
        "wait": k.cmd_wait, "version": k.cmd_version, "cluster-info": k.cmd_cluster_info,
    }  # fmt: skip
    if sub not in table:
        sys.stderr.write(f'Error: unknown command "{sub}" for "kubectl"\nRun \'kubectl --help\' for usage.\n')
        return 1
    try:
        return table[sub](args)
    except Unreachable as e:
        if e.refused:
            sys.stderr.write(
                f"The connection to the server {e.hostport} was refused - did you specify the right host or port?\n"
            )
        else:
            sys.stderr.write(f"Unable to connect to the server: {e.reason}\n")
        return 1
    except ApiError as e:
        if e.code == 401:
            sys.stderr.write("error: You must be logged in to the server (Unauthorized)\n")
        else:
            sys.stderr.write(f"Error from server ({e.reason}): {e.message}\n")
        return 1
    finally:
        for w in k.client.warnings:
            sys.stderr.write(f"Warning: {w}\n")


def _client_only(flags: dict[str, Any]) -> Kubectl:
    k = Kubectl.__new__(Kubectl)
    k.flags, k.out = flags, sys.stdout
    return k


# --------------------------------------------------------------------------- crictl


def crictl_main(argv: list[str]) -> int:
    try:
        flags, pos = parse_flags(argv, {"runtime-endpoint": "str", "image-endpoint": "str", "timeout": "str",
                                        "debug": "bool", "config": "str", "version": "bool", "all": "bool",
                                        "quiet": "bool", "output": "str", "verbose": "bool"},
                                 {"r": "runtime-endpoint", "i": "image-endpoint", "t": "timeout", "D": "debug",
                                  "c": "config", "v": "version", "a": "all", "q": "quiet", "o": "output"})  # fmt: skip
    except Fail as e:
        sys.stderr.write(crictl_fatal(e.message))
        return 1
    if flags.get("version") and not pos:
        print(f"crictl version {CRICTL_VERSION}")
        return 0
    ep = flags.get("runtime-endpoint")
    if not ep:
        cfg = yaml.safe_load(read_text(flags.get("config", "/etc/crictl.yaml")) or "") or {}
        ep = cfg.get("runtime-endpoint") if isinstance(cfg, dict) else None
    if not ep:
        defaults = ["unix:///var/run/dockershim.sock", "unix:///run/containerd/containerd.sock",
                    "unix:///run/crio/crio.sock", "unix:///var/run/cri-dockerd.sock"]  # fmt: skip
        sys.stderr.write(f'time="{dt.datetime.now().astimezone().isoformat(timespec="seconds")}" level=warning '
                         f'msg="runtime connect using default endpoints: {defaults}. As the default settings are now '
                         'deprecated, you should set the endpoint instead."\n')  # fmt: skip
        ep = next((d for d in defaults if os.path.exists(sock_path(d))), defaults[0])
    sub = pos[0] if pos else ""
    rc, ver = ctr(ep, "version", timeout=10)
    if rc != 0 or "Server:" not in ver:
        what = {"info": "getting status of runtime", "version": "getting the runtime version"}.get(
            sub, "connect"
        )
        sys.stderr.write(crictl_fatal(f"{what}: connect: connect endpoint '{ep}', make sure you are running as root "
                                      "and the endpoint has been started: context deadline exceeded"))  # fmt: skip
        return 1
    if sub == "info":
        print(json.dumps(cri_info(ep, ver), indent=2))
    elif sub == "version":
        print(
            f"Version:  0.1.0\nRuntimeName:  containerd\nRuntimeVersion:  {containerd_version(ver)}\nRuntimeApiVersion:  v1alpha2"
        )
    elif sub == "images":
        _, out = ctr(ep, "-n", "k8s.io", "images", "ls")
        rows = [["IMAGE", "TAG", "IMAGE ID", "SIZE"]]
        for line in out.splitlines()[1:]:
            f = line.split()
            if len(f) < 5 or f[0].startswith("sha256:") or "@" in f[0]:
                continue
            repo, _, tag = f[0].rpartition(":")
            if "/" in tag:
                repo, tag = f[0], "<none>"
            rows.append([repo, tag, f[2].split(":")[-1][:13], f[3] + f[4].replace("i", "").replace("B", "B")])
        if flags.get("quiet"):
            print("\n".join(r[0] + ":" + r[1] for r in rows[1:]))
        else:
            sys.stdout.write(tabwrite(rows))
    elif sub == "ps":
        _, out = ctr(ep, "-n", "k8s.io", "tasks", "ls")
        rows = [["CONTAINER", "IMAGE", "CREATED", "STATE", "NAME", "ATTEMPT", "POD ID"]]
        for line in out.splitlines()[1:]:
            f = line.split()
            if len(f) >= 3 and (flags.get("all") or f[2] == "RUNNING"):
                rows.append(
                    [f[0][:13], "", "", "Running" if f[2] == "RUNNING" else "Exited", f[0][:13], "0", ""]
                )
        sys.stdout.write(
            "\n".join(r[0] for r in rows[1:]) + ("\n" if rows[1:] else "")
            if flags.get("quiet")
            else tabwrite(rows)
        )
    elif sub == "pull" and len(pos) > 1:
        rc, out = pull_image(ep, pos[1])
        (sys.stderr if rc else sys.stdout).write(out)
        return rc
    elif sub == "inspecti" and len(pos) > 1:
        if not image_exists(ep, pos[1]):
            sys.stderr.write(crictl_fatal(f'no such image "{pos[1]}" present'))
            return 1
        print(json.dumps({"status": {"repoTags": [pos[1]]}}, indent=2))
    else:
        sys.stderr.write(crictl_fatal(f"standin: crictl {sub} is not supported"))
        return 1
    return 0


# --------------------------------------------------------------------------- entry point


def kubeadm_main(argv: list[str]) -> int:
    try:
        return cmd_kubeadm(argv)
    except Fail as e:
        sys.stdout.flush()
        sys.stderr.write(f"{e.message}\n{STACK_HINT}\n")
        return e.code


def main(argv: list[str]) -> int:
    name = os.path.basename(argv[0])
    if name.endswith(".py"):  # run as the source file: first argument names the tool
        name, argv = (argv[1], argv[1:]) if len(argv) > 1 else ("", argv)
    tools: dict[str, Callable[[list[str]], int]] = {
        "kubeadm": kubeadm_main, "kubelet": kubelet_main, "kubectl": kubectl_main, "crictl": crictl_main,
    }  # fmt: skip
    if name not in tools:
        sys.stderr.write(
            "usage: k8s_standin.py {kubeadm|kubelet|kubectl|crictl} ...  (or install under those names)\n"
        )
        return 2
    if name == "kubelet" and "--version" in argv[1:]:
        print(f"Kubernetes {VERSION}")
        return 0
    try:
        return tools[name](argv[1:])
    except Fail as e:
        sys.stderr.write(e.message + "\n")
        return e.code
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
