"""Kubeconfigs and the API client (kubectl, kubelet and kubeadm talk to the API server through it)."""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import os
import ssl
import tempfile
import urllib.parse
from typing import Any

import yaml

from .util import VERSION, Fail, b64, hp, read_text

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
            # a PATCH says which patch it is; the stand-in's own clients send JSON merge patches
            json_body = ctype == "application/json"
            headers["Content-Type"] = (
                "application/merge-patch+json" if method == "PATCH" and json_body else ctype
            )
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
