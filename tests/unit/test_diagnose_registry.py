"""The registry layer of `appliance diagnose`: regpull.py (the script a node runs) against a
registry stand-in on loopback over TLS with basic auth, finding the largest image and pulling its
blobs with the credentials where the install leaves them; then its recorded output ranked, its
skips and failures, and the pod network's documented skip."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from ipaddress import IPv4Address
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from appliance_cli.core.checks import diagnose
from appliance_cli.core.checks.diagnose import measure_registry, pod_network_result, rank, registry_result
from appliance_cli.core.checks.model import NodeFacts, Status
from appliance_cli.core.checks.probe import parse
from appliance_cli.core.siteconfig import SiteConfig, load_site
from tests._support.paths import EXAMPLE, ROOT

SCRIPT = ROOT / "appliance_cli" / "core" / "checks" / "regpull.py"
PASSWORD = "s3cret-pull-password"
BIG = b"\1" * 3_000_000
SMALL = b"\2" * 1000


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


BLOBS = {_digest(b): b for b in (BIG, SMALL, b"{}")}
MANIFESTS = {
    "small": {"config": {"digest": _digest(b"{}"), "size": 2}, "layers": [{"digest": _digest(SMALL), "size": 1000}]},
    "big": {"config": {"digest": _digest(b"{}"), "size": 2}, "layers": [{"digest": _digest(BIG), "size": len(BIG)}]},
}  # fmt: skip


class _Registry(http.server.BaseHTTPRequestHandler):
    """/v2/_catalog, tags/list, manifests, blobs; 401 without the right basic auth."""

    protocol_version = "HTTP/1.1"  # kept alive, as the registry does
    blob_gets: list[str] = []

    def do_GET(self) -> None:
        want = "Basic " + base64.b64encode(f"appliance:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != want:
            return self._send(401, b"{}")
        parts = self.path.split("/")  # "", "v2", repo, kind, ref
        if self.path.startswith("/v2/_catalog"):
            return self._send(200, json.dumps({"repositories": sorted(MANIFESTS)}).encode())
        if parts[3:5] == ["tags", "list"]:
            return self._send(200, json.dumps({"name": parts[2], "tags": ["v1"]}).encode())
        if parts[3] == "manifests":
            return self._send(200, json.dumps(MANIFESTS[parts[2]]).encode())
        if parts[3] == "blobs" and parts[4] in BLOBS:
            self.blob_gets.append(parts[2])
            return self._send(200, BLOBS[parts[4]])
        return self._send(404, b"{}")

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(HOST:PORT on loopback, the CA file), a CA-signed certificate for 127.0.0.1."""
    d = tmp_path_factory.mktemp("registry")
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    now, ca_name = datetime.now(UTC), x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "registry CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=9))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))  # fmt: skip
    cert = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(ca_name).public_key(key.public_key())
            .serial_number(2).not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=9))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]), critical=True)
            .sign(ca_key, hashes.SHA256()))  # fmt: skip
    (d / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (d / "tls.pem").write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )  # fmt: skip
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "tls.pem")
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", d / "ca.crt"
    server.shutdown()


def _run(
    addr: str, ca: Path, tmp: Path, containerd: str = "", mb: float = 10, seconds: float = 5
) -> dict[str, str]:
    (tmp / "config.toml").write_text(containerd)
    args = [addr, str(ca), str(tmp / "none.password"), str(tmp / "config.toml"), str(tmp / "none.json"), str(mb), str(seconds)]  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-", *args], input=SCRIPT.read_text(), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and PASSWORD not in r.stdout + r.stderr, r.stderr
    return {k: v for k, v in parse("n", r.stdout + "probe_end=1\n").values.items() if k != "probe_end"}


def _containerd(addr: str, password: str) -> str:
    """config.toml's auth table as roles/container_runtime's template renders it."""
    return (f'    [plugins."io.containerd.grpc.v1.cri".registry]\n      config_path = "/etc/containerd/certs.d"\n\n'
            f'      [plugins."io.containerd.grpc.v1.cri".registry.configs."{addr}".auth]\n'
            f'        username = "appliance"\n        password = {json.dumps(password)}\n')  # fmt: skip


def test_a_node_pulls_the_largest_image_with_containerds_credentials(registry, tmp_path: Path) -> None:
    addr, ca = registry
    _Registry.blob_gets.clear()
    got = _run(addr, ca, tmp_path, _containerd(addr, PASSWORD), mb=10)
    assert got["registry_pull_image"] == "big:v1 (2 blobs, 3.0 MB)"
    assert int(got["registry_pull_bytes"]) >= 10_000_000 and float(got["registry_pull_mbps"]) > 0
    assert set(_Registry.blob_gets) == {"big"}  # over and over until 10 MB: the image is 3 MB


def test_wrong_credentials_are_an_error_naming_the_registry(registry, tmp_path: Path) -> None:
    addr, ca = registry
    got = _run(addr, ca, tmp_path, _containerd(addr, "wrong"))
    assert got == {
        "registry_pull_error": f"HTTP 401 from https://{addr}/v2/: the registry refused this node's pull credentials"
    }


def test_no_credentials_and_no_ca(registry, tmp_path: Path) -> None:
    addr, ca = registry
    assert _run(addr, ca, tmp_path)["registry_pull_error"].startswith("no pull credentials on this node")
    skip = _run(addr, tmp_path / "no-ca.crt", tmp_path)
    assert skip == {
        "registry_pull_skip": f"the registry is not installed yet (no CA at {tmp_path / 'no-ca.crt'})"
    }


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> SiteConfig:
    d = tmp_path_factory.mktemp("site")
    shutil.copy(EXAMPLE, d / "appliance.yml")
    return load_site(d)


# regpull.py's output on three nodes, as recorded: gpu2 pulls at a fifth of its peers' rate
RECORDED = {
    "master1": "registry_pull_image=gpu-operator/driver:550.90.07-ubuntu20.04 (9 blobs, 1351.2 MB)\nregistry_pull_bytes=256000000\nregistry_pull_mbps=1104.5\n",
    "gpu1": "registry_pull_image=gpu-operator/driver:550.90.07-ubuntu20.04 (9 blobs, 1351.2 MB)\nregistry_pull_bytes=256000000\nregistry_pull_mbps=1012.0\n",
    "gpu2": "registry_pull_image=gpu-operator/driver:550.90.07-ubuntu20.04 (9 blobs, 1351.2 MB)\nregistry_pull_bytes=256000000\nregistry_pull_mbps=208.3\n",
}  # fmt: skip


def _recorded(node: str, text: str) -> NodeFacts:
    return parse(node, text + "virt_type=none\nprobe_end=1\n")


def test_a_slow_pull_is_ranked_against_the_other_nodes(cfg: SiteConfig) -> None:
    facts = {n: _recorded(n, t) for n, t in RECORDED.items()}
    ranked = {r.node: (share, r) for share, r in rank(cfg, cfg.nodes, facts) if r.layer == "registry"}
    share, slow = ranked["gpu2"]
    assert (slow.check, slow.status, slow.value, slow.unit) == (
        "pull_throughput",
        Status.FAIL,
        "208.3 MB/s",
        "MB/s",
    )
    assert slow.expected == "peers' median 1058.2 MB/s" and share == pytest.approx(208.3 / 1058.25)
    assert ranked["gpu1"][1].status is Status.PASS and diagnose.bottleneck(list(ranked.values())) == slow


def test_a_pull_that_could_not_run_is_a_skip_or_a_failure(cfg: SiteConfig) -> None:
    skip = registry_result(
        cfg.node("gpu1"), _recorded("gpu1", "registry_pull_skip=the registry holds no image yet\n")
    )
    assert skip is not None and (skip.status, skip.hint) == (Status.SKIP, "the registry holds no image yet")
    fail = registry_result(cfg.node("gpu1"), _recorded("gpu1", "registry_pull_error=HTTP 401 from https://master1:5000/v2/: "
                                                       "the registry refused this node's pull credentials\n"))  # fmt: skip
    assert fail is not None and fail.status is Status.FAIL and fail.value.startswith("HTTP 401")
    assert registry_result(cfg.node("gpu1"), _recorded("gpu1", RECORDED["gpu1"])) is None  # ranked instead


def test_measure_registry_sends_the_script_and_no_secret_on_the_command_line(cfg: SiteConfig) -> None:
    seen: list[list[str]] = []

    def run(node, command, stdin, timeout=300):
        seen.append(command)
        return (0, RECORDED.get(node.name, ""), "") if node.name != "gpu2" else (1, "", "python3: not found")

    t = diagnose.Transport(argv=lambda n, c: c)
    t.run = run  # type: ignore[method-assign]
    out = measure_registry(cfg, cfg.nodes, t, 64, 0.5)
    assert out["gpu1"].get("registry_pull_mbps") == "1012.0"
    assert out["gpu2"].get("registry_pull_error") == "failed (rc=1): python3: not found"
    assert seen[0] == ["python3", "-", "master1:5000", "/usr/local/share/ca-certificates/appliance-registry-ca.crt",
                       "/etc/appliance/registry-auth/appliance.password", "/etc/containerd/config.toml",
                       "/var/lib/kubelet/config.json", "64", "1"]  # fmt: skip


def test_credential_paths_are_the_container_runtime_roles_defaults() -> None:
    """Both sides take them from the paths contract (tests/unit/test_paths_contract.py renders them)."""
    d = yaml.safe_load((ROOT / "roles" / "container_runtime" / "defaults" / "main.yml").read_text())
    assert d["container_runtime_containerd_config_file"] == "{{ appliance_paths_containerd_config }}"
    assert d["container_runtime_docker_auth_file"] == "{{ appliance_paths_kubelet_auth }}"
    contract = yaml.safe_load((ROOT / "roles" / "appliance_paths" / "defaults" / "main.yml").read_text())
    assert contract["appliance_paths_containerd_config"] == diagnose.CONTAINERD_CONFIG
    assert contract["appliance_paths_kubelet_auth"] == diagnose.KUBELET_AUTH


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        ("virt_type=none\nkubelet_kind=absent\n", "no kubelet on this node yet"),
        ("virt_type=container\nkubelet_kind=absent\n", "no kubelet on this node yet"),
        ("virt_type=none\nkubelet_kind=binary\n", "not measured by the install's quick diagnose"),
    ],
)
def test_the_pod_network_not_measured_is_a_skip_saying_why(cfg: SiteConfig, facts: str, why: str) -> None:
    r = pod_network_result(
        cfg.node("gpu1"),
        parse("gpu1", facts + "probe_end=1\n"),
        "not measured by the install's quick diagnose: `appliance diagnose` measures it",
    )
    assert (r.layer, r.check, r.status) == ("network", "pod_network", Status.SKIP) and r.hint.startswith(why)


def test_diag_sh_tells_kubeletss_binary_from_a_script(tmp_path: Path) -> None:
    script = (ROOT / "appliance_cli" / "core" / "checks" / "diag.sh").read_text()
    for name, head, kind in (
        ("elf", b"\x7fELF\x02\x01", "binary"),
        ("py", b"#!/usr/bin/python3\n", "stand-in"),
    ):
        bindir = tmp_path / name
        bindir.mkdir()
        (bindir / "kubelet").write_bytes(head)
        (bindir / "kubelet").chmod(0o755)
        env = {
            "PATH": f"{bindir}:/usr/bin:/bin",
            "DIAG_MB": "1",
            "DIAG_ROUNDS": "1",
            "DIAG_DIR": str(tmp_path),
        }
        r = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, env=env, timeout=60)
        assert f"kubelet_kind={kind}\n" in r.stdout, r.stdout


def test_every_output_carries_the_registry_layer(cfg: SiteConfig, tmp_path: Path) -> None:
    from appliance_cli.core.checks import report as reports
    from appliance_cli.core.checks.model import Report

    ranked = rank(cfg, cfg.nodes, {n: _recorded(n, t) for n, t in RECORDED.items()})
    rep = Report("diagnose", cfg.site.name, [r for _, r in ranked], bottleneck=diagnose.bottleneck(ranked))
    for name, write in (("r.json", reports.write_json), ("r.xml", reports.write_junit),
                        ("r.txt", reports.write_text), ("r.html", reports.write_html)):  # fmt: skip
        write(rep, tmp_path / name)
        text = (tmp_path / name).read_text()
        assert "pull_throughput" in text and "208.3 MB/s" in text, name
    assert "<h2>registry — pull_throughput (MB/s, higher is better)</h2>" in (tmp_path / "r.html").read_text()
