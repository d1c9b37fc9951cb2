"""A local "upstream" for `bundle lock` / `bundle build` tests: everything on 127.0.0.1.

* files and their published checksums, helm repositories (index.yaml with digests) and apt
  mirrors (InRelease signed with a key made here + Packages) under one plain HTTP server, each upstream host in a directory
  of its own: https://dl.k8s.io/P is served as http://127.0.0.1:PORT/dl.k8s.io/P;
* the real docker-registry (Debian's 2.8, plain HTTP, writable) holding multi-arch image
  indexes pushed with skopeo: registry.k8s.io/pause is 127.0.0.1:RPORT/registry.k8s.io/pause.

`mirrors()` is the --mirror map that sends the toolkit there; the profile keeps upstream names.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from tests._support.aptmirror import build_deb, index_suite
from tests._support.registry_seed import free_port, layer_tar

REGISTRY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest output clean
        pass


class Upstream:
    def __init__(self, root: Path):
        self._gnupg: Path | None = None
        self.root = root
        self.files = root / "http"
        self.files.mkdir(parents=True)
        self.hosts: set[str] = set()
        self.registry_hosts: set[str] = set()
        self._http: http.server.ThreadingHTTPServer | None = None
        self._registry: subprocess.Popen | None = None
        self.http_port = 0
        self.registry_port = 0

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> Upstream:
        handler = functools.partial(_Quiet, directory=str(self.files))
        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.http_port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        self._start_registry()
        return self

    def _start_registry(self) -> None:
        self.registry_port = free_port()
        config = self.root / "registry.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "version": 0.1,
                    "log": {"level": "warn"},
                    "storage": {
                        "filesystem": {"rootdirectory": str(self.root / "registry")},
                        "delete": {"enabled": True},
                    },
                    "http": {"addr": f"127.0.0.1:{self.registry_port}"},
                }
            )
        )
        log = open(self.root / "registry.log", "wb")  # noqa: SIM115 - closed in stop()
        self._registry_log = log
        self._registry = subprocess.Popen(
            [REGISTRY, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.registry_port}/v2/", timeout=2).close()
                return
            except (urllib.error.URLError, OSError):
                if self._registry.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "docker-registry did not come up: " + (self.root / "registry.log").read_text()[-2000:]
                    ) from None
                time.sleep(0.1)

    @property
    def gnupg(self) -> Path:
        """The archive key's GNUPGHOME, made on first use: short, as gpg-agent's socket path has at
        most 107 bytes and a test's tmp_path under pytest-xdist is longer ("No agent running")."""
        if self._gnupg is None:
            self._gnupg = Path(tempfile.mkdtemp(prefix="upgpg-", dir="/tmp"))
        return self._gnupg

    def stop(self) -> None:
        if self._gnupg is not None:
            env = {**os.environ, "GNUPGHOME": str(self._gnupg)}
            subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, capture_output=True)
            shutil.rmtree(self._gnupg, ignore_errors=True)
        if self._http:
            self._http.shutdown()
            self._http.server_close()
        if self._registry:
            self._registry.terminate()
            try:
                self._registry.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._registry.kill()
            self._registry_log.close()

    def mirrors(self) -> list[str]:
        http = [f"{h}=http://127.0.0.1:{self.http_port}/{h}" for h in sorted(self.hosts)]
        reg = [f"{h}=http://127.0.0.1:{self.registry_port}/{h}" for h in sorted(self.registry_hosts)]
        return http + reg

    # -- files, checksums, charts ----------------------------------------------------------------
    def put(self, url: str, data: bytes) -> str:
        """Serve `data` as upstream `url`; returns url."""
        parts = urlsplit(url)
        self.hosts.add(parts.netloc)
        path = self.files / parts.netloc / parts.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return url

    def publish_file(self, url: str, data: bytes, style: str = "sha256", published: str | None = None) -> str:
        """The file plus its published checksum: `style` "sha256" (a bare hash at URL.sha256, as
        dl.k8s.io) or "sha256sum" (`HEX  NAME` at URL.sha256sum, as containerd); `published`
        overrides the hash upstream publishes (a lie). Returns the checksum URL."""
        self.put(url, data)
        digest = published or sha256(data)
        name = url.rsplit("/", 1)[-1]
        text = f"{digest}\n" if style == "sha256" else f"{digest}  {name}\n"
        return self.put(f"{url}.{style}", text.encode())

    def publish_chart(
        self, repo: str, name: str, version: str, data: bytes, digest: str | None = None
    ) -> str:
        """A chart archive in a helm repository whose index.yaml publishes its digest."""
        url = f"{repo.rstrip('/')}/{name}-{version}.tgz"
        self.put(url, data)
        parts = urlsplit(repo)
        index_path = self.files / parts.netloc / parts.path.strip("/") / "index.yaml"
        index = (
            yaml.safe_load(index_path.read_text())
            if index_path.exists()
            else {"apiVersion": "v1", "entries": {}}
        )
        index["entries"].setdefault(name, []).append(
            {"name": name, "version": version, "digest": digest or sha256(data), "urls": [url]}
        )
        self.put(f"{repo.rstrip('/')}/index.yaml", yaml.safe_dump(index).encode())
        return url

    def archive_key(self) -> tuple[Path, str]:
        """The upstream archive's signing key (made on first use, in a GNUPGHOME of its own): its
        public keyring, as a profile's apt `keyring:` names it, and its fingerprint."""
        home = self.gnupg
        ring = self.root / "archive-keyring.gpg"
        env = {**os.environ, "GNUPGHOME": str(home)}
        gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
        if not ring.exists():
            uid = "Upstream Archive <archive@example.invalid>"
            subprocess.run([*gpg, "--quick-gen-key", uid, "ed25519", "sign", "never"], env=env, check=True)
            ring.write_bytes(
                subprocess.run([*gpg, "--export"], env=env, check=True, capture_output=True).stdout
            )
        colons = subprocess.run(
            [*gpg, "--with-colons", "--fingerprint"], env=env, check=True, capture_output=True
        )
        fpr = next(ln.split(":")[9] for ln in colons.stdout.decode().splitlines() if ln.startswith("fpr:"))
        return ring, fpr

    def archive_keyring_spec(self) -> dict:
        """The apt entry's `keyring:` for this upstream's archives."""
        ring, fpr = self.archive_key()
        return {"path": str(ring), "sha256": sha256(ring.read_bytes()), "fingerprints": [fpr]}

    def publish_apt(self, archive: str, suite: str, packages: list[tuple[str, str, dict[str, str]]]) -> str:
        """An apt archive at upstream URL `archive` (e.g. http://archive.ubuntu.com/ubuntu) with one
        suite, component main: (name, version, control fields) each built as a real .deb; its
        InRelease signed with `archive_key()`. Returns the sources line."""
        parts = urlsplit(archive)
        self.hosts.add(parts.netloc)
        root = self.files / parts.netloc / parts.path.strip("/")
        for name, version, fields in packages:
            build_deb(root / "pool" / suite, name, version, **fields)
        self.archive_key()
        index_suite(root, suite, {**os.environ, "GNUPGHOME": str(self.gnupg)})
        return f"deb {archive} {suite} main\n"

    def apt_pool_file(self, archive: str, suite: str, name: str) -> Path:
        parts = urlsplit(archive)
        (deb,) = (self.files / parts.netloc / parts.path.strip("/") / "pool" / suite).glob(f"{name}_*.deb")
        return deb

    # -- images -----------------------------------------------------------------------------------
    def push_image(
        self, reference: str, platforms: tuple[str, ...] = ("amd64", "arm64"), salt: str = ""
    ) -> str:
        """Push an index of one small image per architecture to `reference` (repo:tag) through the
        mirror; returns the index digest the tag now points at."""
        repo, tag = reference.rsplit(":", 1)
        host, _, path = repo.partition("/")
        self.registry_hosts.add(host)
        layout = self.root / "layouts" / sha256(f"{reference}{platforms}{salt}".encode())[:12]
        shutil.rmtree(layout, ignore_errors=True)
        (layout / "blobs/sha256").mkdir(parents=True)

        def blob(data: bytes) -> dict:
            (layout / "blobs/sha256" / sha256(data)).write_bytes(data)
            return {"digest": f"sha256:{sha256(data)}", "size": len(data)}

        manifests = []
        for arch in platforms:
            layer = gzip.compress(layer_tar({"id": f"{reference} {arch} {salt}\n".encode()}), mtime=0)
            config = json.dumps(
                {"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
            ).encode()
            manifest = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": MT_MANIFEST,
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **blob(config)},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **blob(layer)}],
                }
            ).encode()
            manifests.append(
                {
                    "mediaType": MT_MANIFEST,
                    **blob(manifest),
                    "platform": {"os": "linux", "architecture": arch},
                }
            )
        index = json.dumps({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": manifests}).encode()
        ref = blob(index)
        (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        (layout / "index.json").write_text(
            json.dumps(
                {
                    "schemaVersion": 2,
                    "manifests": [
                        {
                            "mediaType": MT_INDEX,
                            **ref,
                            "annotations": {"org.opencontainers.image.ref.name": tag},
                        }
                    ],
                }
            )
        )
        dest = f"docker://127.0.0.1:{self.registry_port}/{host}/{path}:{tag}"
        subprocess.run(
            [
                "skopeo",
                "copy",
                "--all",
                "--preserve-digests",
                "--dest-tls-verify=false",
                f"oci:{layout}:{tag}",
                dest,
            ],
            check=True,
            capture_output=True,
        )
        return ref["digest"]

    def platform_digest(self, index_digest: str, arch: str = "amd64") -> str:
        """The per-arch manifest digest inside an index this upstream pushed."""
        for layout in (self.root / "layouts").iterdir():
            p = layout / "blobs/sha256" / index_digest.split(":", 1)[1]
            if p.exists():
                doc = json.loads(p.read_bytes())
                return next(m["digest"] for m in doc["manifests"] if m["platform"]["architecture"] == arch)
        raise KeyError(index_digest)
