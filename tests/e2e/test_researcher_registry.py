"""The researcher registry on a lab of its own (the 2-node lab site as installed, restored from
its snapshot; the registry turned on in the site config and installed): a site user pushes an
image with skopeo (an OCI directory made here) to researcher_registry.address; the nodes' pull
account cannot push to either process (401 on the push one, where it has no account; 405 on the
read-only one); worker1 pulls the image by the researcher address through containerd's CRI
(crictl), which goes to the read-only endpoint with the nodes' account; no file on the worker and
nothing in the run's artifacts holds a researcher's password; a re-run changes nothing; a user
removed from the site loses access and a changed password file takes effect."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import secrets
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.core.siteconfig import SiteConfig, load_site
from tests._support.lab_nodes import run_as_root

LAB = "rrg"
IMAGE = "research/demo:1"

# Runs in the lab's network namespace: one HTTP request with Basic auth read from stdin (never
# on a command line), verified against the registry CA; prints the status code.
HTTP = r"""
import base64, json, ssl, sys, urllib.error, urllib.request
a = json.load(sys.stdin)
req = urllib.request.Request(a["url"], method=a["method"], data=b"" if a["method"] == "POST" else None)
if a.get("user"):
    tok = base64.b64encode(f"{a['user']}:{a['password']}".encode()).decode()
    req.add_header("Authorization", "Basic " + tok)
ctx = ssl.create_default_context(cafile=a["ca"])
try:
    print(urllib.request.urlopen(req, context=ctx, timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code)
"""


def _oci_image(root: Path) -> str:
    """A one-layer OCI image layout at `root` (tag `demo`); returns the manifest digest."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> tuple[str, int]:
        h = hashlib.sha256(data).hexdigest()
        (blobs / h).write_bytes(data)
        return f"sha256:{h}", len(data)

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        body = b"pushed by a researcher\n"
        info = tarfile.TarInfo("hello.txt")
        info.size, info.mtime, info.mode = len(body), 0, 0o644
        tar.addfile(info, io.BytesIO(body))
    diff_id = "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
    layer, layer_size = blob(gzip.compress(raw.getvalue(), mtime=0))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": ["/hello.txt"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    cfg, cfg_size = blob(json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg, "size": cfg_size},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer, "size": layer_size}
        ],
    }
    man, man_size = blob(json.dumps(manifest).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": man,
                "size": man_size,
                "annotations": {"org.opencontainers.image.ref.name": "demo"},
            }
        ],
    }
    (root / "index.json").write_text(json.dumps(index))
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return man


class Lab:
    def __init__(self, cfg: SiteConfig, netns: str, tmp: Path):
        self.cfg, self.netns, self.tmp = cfg, netns, tmp
        self.certs = tmp / "certs"
        self.certs.mkdir(exist_ok=True)
        (self.certs / "ca.crt").write_text(run_as_root("master1", "cat /etc/appliance/pki/registry-ca.crt"))
        self.master = cfg.master.address
        rr = cfg.researcher_registry
        assert rr is not None
        self.port = int(rr.address.rpartition(":")[2])

    def password(self, user: str) -> str:
        rr = self.cfg.researcher_registry
        assert rr is not None
        f = next(u.password_file for u in rr.users if u.name == user)
        return self.cfg.resolve(f).read_text().strip()

    def status(self, method: str, port: int, path: str, user: str = "", password: str = "") -> int:
        args = {"url": f"https://{self.master}:{port}{path}", "method": method, "user": user,
                "password": password, "ca": str(self.certs / "ca.crt")}  # fmt: skip
        r = subprocess.run(["ip", "netns", "exec", self.netns, sys.executable, "-c", HTTP],
                           input=json.dumps(args), capture_output=True, text=True, timeout=60)  # fmt: skip
        assert r.returncode == 0, r.stderr[-1000:]
        return int(r.stdout.strip())

    def push(self, oci: Path, user: str, password: str) -> subprocess.CompletedProcess[str]:
        """skopeo copy with an auth file (0600) instead of --dest-creds: no secret on a command line."""
        auth = self.tmp / f"auth-{user}.json"
        fd = os.open(auth, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        with os.fdopen(fd, "w") as f:
            json.dump({"auths": {f"{self.master}:{self.port}": {"auth": token}}}, f)
        try:
            return subprocess.run(
                ["ip", "netns", "exec", self.netns, "skopeo", "copy", "--dest-authfile", str(auth),
                 "--dest-cert-dir", str(self.certs), f"oci:{oci}:demo",
                 f"docker://{self.master}:{self.port}/{IMAGE}"],
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
        finally:
            auth.unlink()


def _write_password(site_dir: Path, user: str) -> None:
    p = site_dir / "secrets" / f"{user}.password"
    p.parent.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(18) + "\n")


def _set_users(site_dir: Path, users: list[str]) -> None:
    doc = yaml.safe_load((site_dir / "appliance.yml").read_text())
    doc["researcher_registry"] = {
        "address": "master1:5001",
        "users": [{"name": u, "password_file": f"secrets/{u}.password"} for u in users],
    }
    (site_dir / "appliance.yml").write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture(scope="module")
def lab(installed_lab_cm, request, cli, tmp_path_factory) -> Iterator[tuple[Lab, Any]]:
    """The 2-node lab site as installed (its snapshot); the researcher registry then turned on in
    the site config, as an operator does on a running appliance, and installed."""
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("pushes from the lab host through the lab's network namespace: lab only")
    from tests.e2e.conftest import TWO_NODE_LAB

    with installed_lab_cm(LAB, 2, request.getfixturevalue("lab_bundle"), share=TWO_NODE_LAB) as inst:
        layout = inst.layout
        assert inst.installs[0].rc == 0, inst.installs[0].err[-3000:]
        for u in ("alice", "bob"):
            _write_password(layout.site_dir, u)
        _set_users(layout.site_dir, ["alice", "bob"])
        run = cli("install", "--site", str(layout.site_dir), "--skip-diagnose")
        assert run.rc == 0, run.out[-3000:] + run.err[-3000:]
        yield Lab(load_site(layout.site_dir), layout.netns, tmp_path_factory.mktemp("rrg")), run


@pytest.fixture(scope="module")
def pushed(lab) -> str:
    rl, _ = lab
    oci = rl.tmp / "oci"
    digest = _oci_image(oci)
    r = rl.push(oci, "alice", rl.password("alice"))
    assert r.returncode == 0, r.stderr[-2000:]
    return digest


def test_a_site_user_pushes_and_the_image_is_served_read_only_too(lab, pushed):
    rl, _ = lab
    pull_pw = run_as_root(
        "master1", "cat /etc/appliance/researcher-registry/appliance-nodes.password"
    ).strip()
    tags = "/v2/research/demo/tags/list"
    assert rl.status("GET", rl.port, tags, "bob", rl.password("bob")) == 200  # every site user reads
    assert rl.status("GET", rl.port + 1, tags, "appliance-nodes", pull_pw) == 200
    assert rl.status("GET", rl.port, tags) == 401  # nobody anonymous


def test_the_node_pull_account_cannot_push_anywhere(lab, pushed):
    rl, _ = lab
    pull_pw = run_as_root(
        "master1", "cat /etc/appliance/researcher-registry/appliance-nodes.password"
    ).strip()
    upload = "/v2/research/demo/blobs/uploads/"
    # push process: the nodes' account does not exist there
    assert rl.status("POST", rl.port, upload, "appliance-nodes", pull_pw) == 401
    # read-only process: authenticated, but every write is refused
    assert rl.status("POST", rl.port + 1, upload, "appliance-nodes", pull_pw) == 405
    # the site's accounts are not on the read-only process
    assert rl.status("POST", rl.port + 1, upload, "alice", rl.password("alice")) == 401
    # and a whole skopeo push with the nodes' account fails at both
    oci = rl.tmp / "oci"
    assert rl.push(oci, "appliance-nodes", pull_pw).returncode != 0


def test_a_worker_pulls_the_image_by_the_researcher_address(lab, pushed):
    rl, _ = lab
    ref = f"master1:{rl.port}/{IMAGE}"
    run_as_root("worker1", f"crictl pull {ref}")
    listed = run_as_root("worker1", "ctr -n k8s.io images ls")
    line = next(line for line in listed.splitlines() if line.startswith(ref + " "))
    assert pushed in line, line


def test_no_researcher_password_on_the_worker_or_in_the_artifacts(lab, pushed):
    from appliance_cli import lab as lablib

    rl, _ = lab
    passwords = "\n".join(rl.password(u) for u in ("alice", "bob")) + "\n"
    for node in ("worker1",):
        r = subprocess.run(
            lablib.ssh_argv(node, ["sudo", "grep", "-rlsF", "-f", "/dev/stdin", "/etc", "/var", "/root",
                                   "/home", "/opt", "/srv", "/tmp", "/run", "/usr/local"]),
            input=passwords, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 1 and r.stdout == "", f"{node}: {r.stdout} {r.stderr[-500:]}"
    runs = rl.cfg.site_dir / "runs"
    found = subprocess.run(["grep", "-rlsF", "-f", "/dev/stdin", str(runs)], input=passwords,
                           capture_output=True, text=True)  # fmt: skip
    assert found.returncode == 1 and found.stdout == "", found.stdout


def test_a_re_run_changes_nothing(lab, cli):
    rl, _ = lab
    again = cli("install", "--site", str(rl.cfg.site_dir), "--tags", "researcher_registry", "--skip-diagnose")
    assert again.rc == 0, again.err[-2000:]
    assert again.recap and all(h["changed"] == 0 for h in again.recap.values()), again.recap


def test_a_dry_run_reports_no_drift(lab, cli):
    rl, _ = lab
    dry = cli("install", "--site", str(rl.cfg.site_dir), "--check", "--diff")
    assert dry.rc == 0, dry.err[-2000:]
    assert {h: s["changed"] for h, s in dry.recap.items()} == {n.name: 0 for n in rl.cfg.nodes}
    passwords = [rl.password(u) for u in ("alice", "bob")]
    assert not any(p in dry.out + dry.err for p in passwords)


def test_a_removed_user_loses_access_and_a_new_password_applies(lab, cli, pushed):
    rl, _ = lab
    old = rl.password("alice")
    bob = rl.password("bob")
    _write_password(rl.cfg.site_dir, "alice")
    _set_users(rl.cfg.site_dir, ["alice"])
    r = cli("install", "--site", str(rl.cfg.site_dir), "--tags", "researcher_registry", "--skip-diagnose")
    assert r.rc == 0, r.err[-2000:]
    rl.cfg = load_site(rl.cfg.site_dir)
    assert rl.status("GET", rl.port, "/v2/", "bob", bob) == 401
    assert rl.status("GET", rl.port, "/v2/", "alice", old) == 401
    assert rl.status("GET", rl.port, "/v2/", "alice", rl.password("alice")) == 200
