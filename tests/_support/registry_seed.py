"""Helpers (no tests) shared by the registry-seed / bundle-view tests and the benchmark:
build tiny OCI images and lay them out as a bundle
(manifest.json following appliance_cli/bundle/model.py, blobs at blobs/sha256/<hex>)."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tar(files: dict[str, bytes]) -> bytes:
    """An uncompressed, deterministic layer tarball."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in sorted(files.items()):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            t.addfile(ti, io.BytesIO(data))
    return raw.getvalue()


def image_blobs(layers: list[bytes], label: str) -> tuple[bytes, bytes]:
    """(manifest bytes, config bytes) of an OCI image made of `layers`."""
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {"Cmd": ["/bin/sh"], "Labels": {"test": label}},
        "rootfs": {"type": "layers", "diff_ids": [digest(b) for b in layers]},
    }
    config_b = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": digest(config_b), "size": len(config_b)},
        "layers": [{"mediaType": OCI_LAYER_TAR, "digest": digest(b), "size": len(b)} for b in layers],
    }
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode(), config_b


class BundleWriter:
    """Writes blobs + manifest.json of a minimal bundle."""

    def __init__(self, root: Path, chunk_size: int = 2 * 1024**3):
        self.root = root
        self.chunk_size = chunk_size
        self.blob_dir = root / "blobs" / "sha256"
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        self.artifacts: list[dict] = []

    def blob(self, data: bytes) -> str:
        d = digest(data)
        p = self.blob_dir / d.split(":", 1)[1]
        if not p.exists():
            p.write_bytes(data)
            p.chmod(0o644)
        return d

    def file_entry(self, path: str, data: bytes, chunk: int | None = None) -> dict:
        entry = {"path": path, "digest": digest(data), "size": len(data)}
        if chunk and len(data) > chunk:
            parts = [data[i : i + chunk] for i in range(0, len(data), chunk)]
            entry["chunks"] = [{"digest": self.blob(p), "size": len(p)} for p in parts]
        else:
            self.blob(data)
        return entry

    def add_image(self, name: str, reference: str, layers: list[bytes], chunk: int | None = None) -> dict:
        manifest_b, config_b = image_blobs(layers, name)
        files, seen = [], set()
        for data in [manifest_b, config_b, *layers]:
            d = digest(data)
            if d in seen:
                continue
            seen.add(d)
            files.append(self.file_entry("blobs/sha256/" + d.split(":", 1)[1], data, chunk))
        art = {
            "name": name,
            "kind": "oci-image",
            "version": reference.rsplit(":", 1)[-1],
            "size": sum(f["size"] for f in files),
            "digest": digest(manifest_b),
            "files": files,
            "image": {
                "reference": reference,
                "manifest_digest": digest(manifest_b),
                "media_type": OCI_MANIFEST,
                "config_digest": digest(config_b),
                "layers": [digest(b) for b in layers],
                "platform": "linux/amd64",
            },
        }
        self.artifacts.append(art)
        return art

    def add_files(self, name: str, kind: str, files: dict[str, bytes], **extra) -> dict:
        entries = [self.file_entry(p, data) for p, data in sorted(files.items())]
        lines = "".join(f"{e['path']}\0{e['digest']}\n" for e in sorted(entries, key=lambda e: e["path"]))
        art = {
            "name": name,
            "kind": kind,
            "size": sum(e["size"] for e in entries),
            "digest": entries[0]["digest"] if len(entries) == 1 else digest(lines.encode()),
            "files": entries,
            **extra,
        }
        self.artifacts.append(art)
        return art

    def write(self) -> bytes:
        doc = {
            "schema": "appliance-bundle",
            "schema_version": 1,
            "profile": "test",
            "created": "1970-01-01T00:00:00Z",
            "tool_version": "0.0.0",
            "chunk_size": self.chunk_size,
            "artifacts": self.artifacts,
        }
        raw = (json.dumps(doc, indent=1) + "\n").encode()
        (self.root / "manifest.json").write_bytes(raw)
        # shaped like `appliance bundle sign`'s (bundle_sync checks it names this manifest); not verifiable
        sig = {"format": "appliance-bundle-signature/v1", "algorithm": "ed25519", "key_id": digest(b"test key"),
               "manifest_digest": digest(raw), "signature": "dGVzdA=="}  # fmt: skip
        (self.root / "manifest.sig").write_bytes((json.dumps(sig, indent=1) + "\n").encode())
        return raw


def small_image_set(root: Path, chunk: int | None = None) -> BundleWriter:
    """Three images sharing a base layer; with `chunk`, blobs above it are stored chunked."""
    w = BundleWriter(root)
    base = layer_tar({"bin/sh": b"#!shared base layer\n" * 200, "etc/passwd": b"root:x:0:0::/root:/bin/sh\n"})
    w.add_image("pause", "registry.k8s.io/pause:3.6", [base, layer_tar({"pause": b"pause\n"})])
    w.add_image(
        "flannel",
        "docker.io/flannel/flannel:v0.22.3",
        [base, layer_tar({"opt/bin/flanneld": b"flannel\n" * 5000})],
        chunk=chunk,
    )
    w.add_image("busybox", "docker.io/library/busybox:1.36-lab", [base])
    return w


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
