"""Registry pull throughput for `appliance diagnose`, sent to a node on ssh's standard input
(Python 3.8+, standard library only) and run as root there:
  python3 - ADDRESS CA PASSWORD_FILE CONTAINERD_CONFIG KUBELET_AUTH MB SECONDS
Finds the largest image in the private registry (its layers' and config's sizes, linux/amd64 of
an index), then pulls its blobs over HTTPS with the site's CA and this node's pull credentials,
again and again until MB megabytes or SECONDS have passed: registry_pull_mbps and what was pulled,
as key=value lines; registry_pull_skip=WHY (nothing to measure yet) or registry_pull_error=WHY.
The credentials are read here, where the install put them (the master's password file, else
containerd's config.toml, else kubelet's config.json for docker), and only ever sent to the
registry in an Authorization header: never printed, never on a command line."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.request
from typing import Any

MANIFESTS = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
INDEXES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
CHUNK = 1 << 20


def kv(key: str, value: object) -> None:
    print(f"{key}={value}", flush=True)


def credentials(
    addr: str, password_file: str, containerd_config: str, kubelet_auth: str
) -> tuple[str, str] | None:
    if os.access(password_file, os.R_OK):
        with open(password_file) as f:
            return os.path.basename(password_file)[: -len(".password")], f.read().strip()
    try:
        with open(containerd_config) as f:
            text = f.read()
    except OSError:
        text = ""
    m = re.search(
        rf'registry\.configs\."{re.escape(addr)}"\.auth\]\s*username\s*=\s*(".*?")\s*password\s*=\s*(".*")',
        text,
    )
    if m:
        return json.loads(m.group(1)), json.loads(m.group(2))
    try:
        with open(kubelet_auth) as f:
            user, _, password = base64.b64decode(json.load(f)["auths"][addr]["auth"]).decode().partition(":")
        return user, password
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Registry:
    def __init__(self, addr: str, ca: str, user: str, password: str) -> None:
        self.host, self.base = addr, f"https://{addr}/v2/"
        self.ctx = ssl.create_default_context(cafile=ca)
        token = base64.b64encode((f"{user}:{password}").encode()).decode()
        self.auth = "Basic " + token

    def open(self, path: str, accept: tuple[str, ...] = ()) -> Any:
        headers = {"Authorization": self.auth}
        if accept:
            headers["Accept"] = ", ".join(accept)
        return urllib.request.urlopen(
            urllib.request.Request(self.base + path, headers=headers), context=self.ctx, timeout=30
        )

    def json(self, path: str, accept: tuple[str, ...] = ()) -> Any:
        with self.open(path, accept) as r:
            return json.loads(r.read().decode())

    def image(self, repo: str) -> tuple[int, list[tuple[str, int]], str]:
        """(total bytes, [(digest, size)], tag) of the repository's first tag (amd64 of an index)."""
        tags = sorted(self.json(f"{repo}/tags/list").get("tags") or [])
        if not tags:
            return 0, [], ""
        m = self.json(f"{repo}/manifests/{tags[0]}", MANIFESTS + INDEXES)
        if "manifests" in m:
            amd64 = [d for d in m["manifests"] if d.get("platform", {}).get("architecture") == "amd64"]
            digest = (amd64 or m["manifests"])[0]["digest"]
            m = self.json(f"{repo}/manifests/{digest}", MANIFESTS)
        blobs = [
            (b["digest"], int(b.get("size", 0)))
            for b in [*m.get("layers", []), m.get("config", {})]
            if "digest" in b
        ]
        return sum(s for _, s in blobs), blobs, tags[0]

    def pull(self, repo: str, blobs: list[tuple[str, int]], limit: int, seconds: float) -> tuple[int, float]:
        """Every blob once, then again, until `limit` bytes or `seconds` have passed, on one kept-alive
        connection as a runtime pulls: the blobs' throughput, not the TLS handshakes'."""
        conn = http.client.HTTPSConnection(self.host, context=self.ctx, timeout=30)
        got, t0 = 0, time.perf_counter()
        try:
            while got < limit and time.perf_counter() - t0 < seconds:
                for digest, _ in blobs:
                    conn.request("GET", f"/v2/{repo}/blobs/{digest}", headers={"Authorization": self.auth})
                    r = conn.getresponse()
                    if r.status != 200:
                        raise urllib.error.HTTPError(self.base, r.status, r.reason, r.headers, None)
                    while data := r.read(CHUNK):
                        got += len(data)
                    if got >= limit:
                        break
        finally:
            conn.close()
        return got, time.perf_counter() - t0


def main(
    addr: str,
    ca: str,
    password_file: str,
    containerd_config: str,
    kubelet_auth: str,
    mb: float,
    seconds: float,
) -> None:
    if not os.path.isfile(ca):
        return kv("registry_pull_skip", f"the registry is not installed yet (no CA at {ca})")
    creds = credentials(addr, password_file, containerd_config, kubelet_auth)
    if creds is None:
        return kv(
            "registry_pull_error",
            f"no pull credentials on this node ({containerd_config}, {kubelet_auth})",
        )
    reg = Registry(addr, ca, *creds)
    try:
        repos = reg.json("_catalog?n=1000").get("repositories") or []
        sized = sorted(((reg.image(r), r) for r in repos), key=lambda x: (-x[0][0], x[1]))
        if not sized or not sized[0][0][1]:
            return kv("registry_pull_skip", "the registry holds no image yet")
        (total, blobs, tag), repo = sized[0]
        got, elapsed = reg.pull(repo, blobs, int(mb * 1e6), seconds)
    except urllib.error.HTTPError as exc:
        why = "the registry refused this node's pull credentials" if exc.code == 401 else exc.reason
        return kv("registry_pull_error", f"HTTP {exc.code} from https://{addr}/v2/: {why}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return kv("registry_pull_error", f"https://{addr}/v2/: {getattr(exc, 'reason', exc)}")
    kv("registry_pull_image", f"{repo}:{tag} ({len(blobs)} blobs, {total / 1e6:.1f} MB)")
    kv("registry_pull_bytes", got)
    kv("registry_pull_mbps", f"{got / max(elapsed, 1e-6) / 1e6:.1f}")


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[2], a[3], a[4], float(a[5]), float(a[6]))
