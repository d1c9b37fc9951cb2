#!/usr/bin/env python3
"""A TEST SERVER for the part of Run:ai's control-plane REST API the scheduler_stack role calls —
TEST ONLY, never shipped, never on the production path.

The lab cannot run Run:ai's backend (the helm stand-in renders no templates and runs no pods),
so the e2e fixture starts this file on master1 (a transient systemd unit, `systemd-run`),
listening on the scheduler's external IP, port 443, with the site's certificate for
`site.domain`. Python 3 stdlib only (the node has no venv), one file, state in a JSON file so a
restart keeps it.

Endpoints, shaped like Run:ai's documented REST API (docs.nvidia.com/run-ai, self-hosted
reference; the 2.9 administrator API under /v1/k8s is not in any source found here, so the
current paths are used; the role takes every path from a variable):

  POST /auth/realms/runai/protocol/openid-connect/token   form grant_type=password, client_id,
       username, password -> {access_token, token_type, expires_in}; 401 otherwise
  POST /api/v1/me/password       {currentPassword, newPassword} -> 200; 401 wrong current;
       400 a new password under 12 characters, without upper, lower and digit, or unchanged
  GET  /api/v1/clusters          [{uuid, name, version, domain, status}]
  POST /api/v1/clusters          {name, version, domain} -> 201 {uuid, ...}; 409 same name;
       creates the cluster's `default` department (deserved 0), as Run:ai does
  GET  /api/v1/clusters/{uuid}/cluster-install-info?version=V -> {installationStr, clientSecret,
       repositoryName, chartRepoURL}; 404 unknown cluster
  GET  /api/v1/org-unit/departments | projects      [ ... ]  (?filterBy is not supported)
  POST /api/v1/org-unit/departments {name, clusterId, resources} -> 201; 409 same name in the
       cluster; 400 bad resources
  POST /api/v1/org-unit/projects    {name, clusterId, parentId, resources} -> 201; 409; 400 bad
       resources, unknown parent, or projects over their department's deserved GPUs
  PUT  /api/v1/org-unit/departments/{id}/resources | projects/{id}/resources  [resources] -> 200
  DELETE /api/v1/org-unit/projects/{id} -> 202 {the project}; 404 unknown (202: no source found
       here says which of 200, 202 or 204 Run:ai answers; the role accepts each)
  GET  /healthz (no auth)

What it enforces, as the real one would: the admin's default password ("password") is valid
until changed, then only the new one; every other call needs a bearer token from the login
(401 without or with a stale one: changing the password revokes the tokens); names unique per
cluster (409); deserved >= 0, limit -1 or >= deserved, overQuotaWeight 0..3 (400); a project's
parent must be a department of its cluster; the deserved GPUs of a department's projects may not
exceed the department's (400). Limits: one admin user, no roles/users/access rules, no
node pools but `default`, no pagination or filters, no SSO; the client secret is random per
cluster and returned on every install-info call. Logs never carry a password, token or secret
(only method, path and status).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import ssl
import sys
import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_PASSWORD = "password"  # the vendor's default (the guide: test@run.ai / password)


class State:
    def __init__(self, path: str, admin: str):
        self.path, self.lock = path, threading.Lock()
        try:
            with open(path) as f:
                self.data = json.load(f)
        except FileNotFoundError:
            self.data = {"admin": admin, "password": DEFAULT_PASSWORD, "tokens": [], "clusters": [],
                         "departments": [], "projects": [], "next_id": 1, "log": []}  # fmt: skip

    def save(self) -> None:
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(tmp, self.path)

    def new_id(self) -> str:
        n = self.data["next_id"]
        self.data["next_id"] = n + 1
        return str(n)


class ApiError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _check_resources(resources: Any) -> list[dict[str, Any]]:
    if not isinstance(resources, list) or not resources:
        raise ApiError(400, "resources: a non-empty list is required")
    for r in resources:
        pool = ((r or {}).get("nodePool") or {}).get("name")
        if pool != "default":
            raise ApiError(400, f"resources: node pool {pool!r} does not exist")
        gpu = r.get("gpu") or {}
        deserved, limit, weight = gpu.get("deserved"), gpu.get("limit", -1), gpu.get("overQuotaWeight", 2)
        if not isinstance(deserved, (int, float)) or isinstance(deserved, bool) or deserved < 0:
            raise ApiError(400, "resources.gpu.deserved: a number >= 0 is required")
        if not isinstance(limit, (int, float)) or (limit != -1 and limit < deserved):
            raise ApiError(400, "resources.gpu.limit: -1 (no limit) or >= deserved")
        if weight not in (0, 1, 2, 3):
            raise ApiError(400, "resources.gpu.overQuotaWeight: 0 to 3")
    return resources


def _deserved(unit: dict[str, Any]) -> float:
    return float(unit["resources"][0]["gpu"]["deserved"])


class Api:
    def __init__(self, state: State, domain: str):
        self.s, self.domain = state, domain

    # -- auth --
    def login(self, form: dict[str, str]) -> tuple[int, Any]:
        d = self.s.data
        if form.get("grant_type") != "password" or not form.get("client_id"):
            raise ApiError(400, "unsupported_grant_type or missing client_id")
        if form.get("username") != d["admin"] or not secrets.compare_digest(
            form.get("password", ""), d["password"]
        ):
            raise ApiError(401, "invalid_grant: Invalid user credentials")
        token = secrets.token_urlsafe(32)
        d["tokens"].append(token)
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": 3600}

    def authorised(self, header: str | None) -> None:
        token = (header or "").removeprefix("Bearer ").strip()
        if not token or token not in self.s.data["tokens"]:
            raise ApiError(401, "Unauthorized")

    def change_password(self, body: dict[str, Any]) -> tuple[int, Any]:
        d = self.s.data
        if not secrets.compare_digest(str(body.get("currentPassword", "")), d["password"]):
            raise ApiError(401, "currentPassword is wrong")
        new = str(body.get("newPassword", ""))
        if (
            new == d["password"]
            or len(new) < 12
            or not (
                any(c.isupper() for c in new)
                and any(c.islower() for c in new)
                and any(c.isdigit() for c in new)
            )
        ):
            raise ApiError(
                400,
                "newPassword: at least 12 characters with upper, lower case and digits, not the current one",
            )
        d["password"], d["tokens"] = new, []  # the old tokens are revoked
        d["log"].append("password changed")
        return 200, {}

    # -- clusters --
    def cluster(self, cid: str) -> dict[str, Any]:
        for c in self.s.data["clusters"]:
            if c["uuid"] == cid:
                return c
        raise ApiError(404, f"cluster {cid} not found")

    def create_cluster(self, body: dict[str, Any]) -> tuple[int, Any]:
        name = str(body.get("name") or "")
        if not name:
            raise ApiError(400, "name is required")
        if any(c["name"] == name for c in self.s.data["clusters"]):
            raise ApiError(409, f"cluster {name} already exists")
        c = {"uuid": str(uuid.uuid4()), "name": name, "version": body.get("version"), "domain": body.get("domain"),
             "status": "waiting-to-connect", "secret": secrets.token_urlsafe(24)}  # fmt: skip
        self.s.data["clusters"].append(c)
        self.s.data["departments"].append(
            {"id": self.s.new_id(), "name": "default", "clusterId": c["uuid"],
             "resources": [{"nodePool": {"name": "default"}, "gpu": {"deserved": 0, "limit": -1, "overQuotaWeight": 2}}]}
        )  # fmt: skip
        return 201, {k: v for k, v in c.items() if k != "secret"}

    def install_info(self, cid: str, query: dict[str, str]) -> tuple[int, Any]:
        c = self.cluster(cid)
        version = query.get("version") or c.get("version") or ""
        url = f"https://{self.domain}"
        cmd = (
            "helm repo add runai https://runai.jfrog.io/artifactory/api/helm/run-ai-charts --force-update\n"
            "helm repo update\n"
            f"helm upgrade -i runai-cluster runai/runai-cluster -n runai --create-namespace \\\n"
            f"--set controlPlane.url={url} \\\n--set controlPlane.clientSecret={c['secret']} \\\n"
            f'--set cluster.uid={c["uuid"]} \\\n--set cluster.url={url} --version="{version}"'
        )
        return 200, {"installationStr": cmd, "clientSecret": c["secret"], "repositoryName": "runai",
                     "chartRepoURL": "https://runai.jfrog.io/artifactory/api/helm/run-ai-charts"}  # fmt: skip

    # -- org units --
    def create_unit(self, kind: str, body: dict[str, Any]) -> tuple[int, Any]:
        name, cid = str(body.get("name") or ""), str(body.get("clusterId") or "")
        if not name or not cid:
            raise ApiError(400, "name and clusterId are required")
        self.cluster(cid)
        resources = _check_resources(body.get("resources"))
        units = self.s.data[kind]
        if any(u["name"] == name and u["clusterId"] == cid for u in units):
            raise ApiError(409, f"{kind[:-1]} {name} already exists in cluster {cid}")
        unit = {"id": self.s.new_id(), "name": name, "clusterId": cid, "resources": resources}
        if kind == "projects":
            unit["parentId"] = str(body.get("parentId") or "")
            self._check_parent(unit, unit)
        units.append(unit)
        return 201, unit

    def _check_parent(self, project: dict[str, Any], changed: dict[str, Any]) -> None:
        dep = next((d for d in self.s.data["departments"]
                    if d["id"] == project["parentId"] and d["clusterId"] == project["clusterId"]), None)  # fmt: skip
        if dep is None:
            raise ApiError(400, f"parentId {project['parentId']!r}: no such department in the cluster")
        self._check_department(dep, changed)

    def _check_department(self, dep: dict[str, Any], changed: dict[str, Any]) -> None:
        siblings = [
            changed if p["id"] == changed["id"] else p
            for p in self.s.data["projects"]
            if p["parentId"] == dep["id"]
        ]
        if changed.get("parentId") == dep["id"] and all(p["id"] != changed["id"] for p in siblings):
            siblings.append(changed)
        total = sum(_deserved(p) for p in siblings)
        dep_deserved = _deserved(changed if changed["id"] == dep["id"] else dep)
        if total > dep_deserved:
            raise ApiError(400, f"the projects of department {dep['name']} would have {total:g} deserved GPUs, "
                                f"more than its {dep_deserved:g}")  # fmt: skip

    def update_resources(self, kind: str, uid: str, body: Any) -> tuple[int, Any]:
        unit = next((u for u in self.s.data[kind] if u["id"] == uid), None)
        if unit is None:
            raise ApiError(404, f"{kind[:-1]} {uid} not found")
        changed = dict(unit, resources=_check_resources(body))
        if kind == "projects":
            self._check_parent(changed, changed)
        else:
            self._check_department(unit, changed)
        unit["resources"] = changed["resources"]
        return 200, unit

    def delete_project(self, uid: str) -> tuple[int, Any]:
        unit = next((u for u in self.s.data["projects"] if u["id"] == uid), None)
        if unit is None:
            raise ApiError(404, f"project {uid} not found")
        self.s.data["projects"].remove(unit)
        return 202, unit


class Handler(BaseHTTPRequestHandler):
    api: Api
    server_version = "runai-api-test/2.9"

    def log_message(self, fmt: str, *args: Any) -> None:  # method, path (no query) and status only
        sys.stderr.write(
            f"{self.command} {urllib.parse.urlsplit(self.path).path} {args[1] if len(args) > 1 else ''}\n"
        )

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _json(self) -> Any:
        try:
            return json.loads(self._body() or b"null")
        except ValueError:
            raise ApiError(400, "the body is not JSON") from None

    def _dispatch(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        query = dict(urllib.parse.parse_qsl(url.query))
        api = self.api
        with api.s.lock:
            try:
                if method == "GET" and parts == ["healthz"]:
                    code, body = 200, {"status": "ok"}
                elif method == "POST" and url.path == "/auth/realms/runai/protocol/openid-connect/token":
                    code, body = api.login(dict(urllib.parse.parse_qsl(self._body().decode())))
                else:
                    api.authorised(self.headers.get("Authorization"))
                    code, body = self._route(method, parts, query)
                api.s.save()
            except ApiError as exc:
                code, body = exc.code, {"code": exc.code, "message": exc.message}
        self._send(code, body)

    def _route(self, method: str, parts: list[str], query: dict[str, str]) -> tuple[int, Any]:
        api, d = self.api, self.api.s.data
        if parts[:2] != ["api", "v1"]:
            raise ApiError(404, "not found")
        rest = parts[2:]
        if method == "POST" and rest == ["me", "password"]:
            return api.change_password(self._json() or {})
        if rest == ["clusters"]:
            if method == "GET":
                return 200, [{k: v for k, v in c.items() if k != "secret"} for c in d["clusters"]]
            if method == "POST":
                return api.create_cluster(self._json() or {})
        if method == "GET" and len(rest) == 3 and rest[0] == "clusters" and rest[2] == "cluster-install-info":
            return api.install_info(rest[1], query)
        if len(rest) >= 2 and rest[0] == "org-unit" and rest[1] in ("departments", "projects"):
            kind = rest[1]
            if method == "GET" and len(rest) == 2:
                return 200, d[kind]
            if method == "POST" and len(rest) == 2:
                return api.create_unit(kind, self._json() or {})
            if method == "PUT" and len(rest) == 4 and rest[3] == "resources":
                return api.update_resources(kind, rest[2], self._json())
            if method == "DELETE" and len(rest) == 3 and kind == "projects":
                return api.delete_project(rest[2])
        raise ApiError(404 if method in ("GET", "POST", "PUT", "DELETE") else 405, "not found")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")


def serve(
    address: str, port: int, cert: str, key: str, state: str, admin: str, domain: str
) -> ThreadingHTTPServer:
    Handler.api = Api(State(state, admin), domain)
    httpd = ThreadingHTTPServer((address, port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    return httpd


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run:ai API test server (tests only)")
    p.add_argument("--address", required=True)
    p.add_argument("--port", type=int, default=443)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--state", required=True)
    p.add_argument("--admin", required=True, help="the admin e-mail (scheduler.admin_email)")
    p.add_argument("--domain", required=True)
    a = p.parse_args(argv)
    serve(a.address, a.port, a.cert, a.key, a.state, a.admin, a.domain).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
