"""HTTP file download over loopback: checksum enforced, interrupted download resumed via Range."""

from __future__ import annotations

import hashlib
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from appliance_cli.bundle.fetch import fetch
from appliance_cli.errors import BundleError


class RangeHandler(SimpleHTTPRequestHandler):
    def log_message(self, *a) -> None:
        return None

    def do_GET(self) -> None:
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        rng = self.headers.get("Range")
        start = int(rng.split("=")[1].rstrip("-")) if rng else 0
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start:])


@pytest.fixture
def server(tmp_path: Path):
    root = tmp_path / "www"
    root.mkdir()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(RangeHandler, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_fetch_checks_and_resumes(server, tmp_path: Path) -> None:
    root, base = server
    data = bytes(range(256)) * 4000
    (root / "kubeadm").write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"{sha}.part").write_bytes(data[:300_000])  # an interrupted earlier run
    got = fetch(f"{base}/kubeadm", sha, cache, "file/kubeadm")
    assert got.read_bytes() == data and not (cache / f"{sha}.part").exists()


def test_fetch_checksum_mismatch_and_404(server, tmp_path: Path) -> None:
    root, base = server
    (root / "x").write_bytes(b"evil")
    with pytest.raises(BundleError, match="the profile pins"):
        fetch(f"{base}/x", "0" * 64, tmp_path / "c", "file/x")
    assert not list((tmp_path / "c").glob("*.part"))
    with pytest.raises(BundleError, match="HTTP 404"):
        fetch(f"{base}/missing", "0" * 64, tmp_path / "c", "file/missing")
