"""The registry_seed fast path against the REAL docker-registry (Debian's 2.8), on 127.0.0.1.

The store is written by the module's core function, then `docker-registry serve` is started on
a free loopback port with the role's own config template (TLS + htpasswd) and every image is
pulled back by digest with the OCI Accept header. Also: bundle_sync with a corrupted blob."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import jinja2
import pytest

from tests._support.modules import load_role_module
from tests._support.registry_seed import ROOT, digest, free_port, layer_tar, small_image_set

pytestmark = pytest.mark.integration

REGISTRY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
OCI_ACCEPT = "application/vnd.oci.image.manifest.v1+json"
USER, PASSWORD = "appliance-pull", "not-a-real-secret-0123"
needs_registry = pytest.mark.skipif(
    not (os.access(REGISTRY, os.X_OK) and shutil.which("htpasswd") and shutil.which("openssl")),
    reason="needs docker-registry, apache2-utils (htpasswd) and openssl: scripts/bootstrap.sh installs them",
)

seedmod = load_role_module("registry", "registry_seed")
syncmod = load_role_module("bundle_repo", "bundle_sync")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_tls(d: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 (the same openssl shape as the role)."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test CA",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "server.key", "-out", "server.csr", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "san.ext", "-out", "server.crt", cwd=d)  # fmt: skip
    return d / "ca.crt", d / "server.crt", d / "server.key"


def render_config(path: Path, **values) -> None:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    src = (ROOT / "roles/registry/templates/etc/docker/registry/config.yml.j2").read_text()
    path.write_text(env.from_string(src).render(ansible_managed="test", **values))


class Registry:
    def __init__(self, url: str, ctx: ssl.SSLContext):
        self.url, self.ctx = url, ctx

    def get(self, path: str, accept: str | None = OCI_ACCEPT, auth: bool = True, method: str = "GET"):
        req = urllib.request.Request(self.url + path, method=method)
        if accept:
            req.add_header("Accept", accept)
        if auth:
            token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            req.add_header("Authorization", "Basic " + token)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=10) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()


@pytest.fixture
def seeded(tmp_path: Path):
    bundle = tmp_path / "bundle"
    writer = small_image_set(bundle, chunk=16 * 1024)  # flannel's big layer is stored chunked
    writer.write()
    storage = tmp_path / "storage"
    first = seedmod.seed(str(bundle), str(storage), "auto")
    return bundle, storage, writer, first


@pytest.fixture
def registry(tmp_path: Path, seeded, request):
    tls = tmp_path / "tls"
    tls.mkdir()
    ca, cert, key = make_tls(tls)
    htpasswd = tmp_path / "htpasswd"
    subprocess.run(["htpasswd", "-B", "-b", "-c", "-i", str(htpasswd), USER], input=PASSWORD.encode(),
                   check=True, capture_output=True)  # fmt: skip
    port = free_port()
    config = tmp_path / "config.yml"
    render_config(
        config,
        registry_log_level="warn",
        registry_storage_root=str(seeded[1]),
        registry_listen_address="127.0.0.1",
        __registry_port=port,
        registry_tls_cert=str(cert),
        registry_tls_key=str(key),
        registry_auth_realm="appliance-test",
        registry_htpasswd_file=str(htpasswd),
    )
    log = open(tmp_path / "registry.log", "wb")  # noqa: SIM115 - closed by the finalizer
    proc = subprocess.Popen([REGISTRY, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()

    request.addfinalizer(stop)
    reg = Registry(f"https://127.0.0.1:{port}", ssl.create_default_context(cafile=str(ca)))
    deadline = time.monotonic() + 20
    while True:
        try:
            status, _, _ = reg.get("/v2/", auth=False)
            if status == 401:
                break
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(
                "docker-registry did not come up:\n" + (tmp_path / "registry.log").read_text()[-3000:]
            )
        time.sleep(0.1)
    return reg, port


def _images(writer) -> list[dict]:
    return [a for a in writer.artifacts if a["kind"] == "oci-image"]


def test_fixture_bundle_follows_the_model(seeded):
    from appliance_cli.bundle.model import parse_manifest

    bundle = seeded[0]
    m = parse_manifest((bundle / "manifest.json").read_bytes())
    assert [a.image.reference for a in m.artifacts if a.image] == [
        "registry.k8s.io/pause:3.6",
        "docker.io/flannel/flannel:v0.22.3",
        "docker.io/library/busybox:1.36-lab",
    ]


def test_seed_layout_and_idempotence(seeded):
    bundle, storage, writer, first = seeded
    assert first["changed"] is True
    assert [i["repository"] for i in first["images"]] == ["pause", "flannel/flannel", "library/busybox"]
    # shared base layer once; the chunked layer is joined by copying, the rest hard-linked
    assert first["blobs_copied"] == 1
    assert first["blobs_linked"] >= 6
    v2 = storage / "docker/registry/v2"
    for art in _images(writer):
        img = art["image"]
        repo, tag = seedmod.split_reference(img["reference"])
        r = v2 / "repositories" / repo
        mh = img["manifest_digest"].split(":")[1]
        for d in [*img["layers"], img["config_digest"]]:
            assert (r / "_layers/sha256" / d.split(":")[1] / "link").read_bytes() == d.encode()
        assert (r / "_manifests/revisions/sha256" / mh / "link").read_bytes() == img[
            "manifest_digest"
        ].encode()
        assert (r / f"_manifests/tags/{tag}/current/link").read_bytes() == img["manifest_digest"].encode()
        assert (r / f"_manifests/tags/{tag}/index/sha256/{mh}/link").is_file()
        for d in [img["manifest_digest"], img["config_digest"], *img["layers"]]:
            data = (v2 / "blobs/sha256" / d[7:9] / d[7:] / "data").read_bytes()
            assert digest(data) == d
    pause_manifest = _images(writer)[0]["image"]["manifest_digest"]
    blob = v2 / "blobs/sha256" / pause_manifest[7:9] / pause_manifest[7:] / "data"
    assert blob.stat().st_ino == (bundle / "blobs/sha256" / pause_manifest[7:]).stat().st_ino  # hard link
    assert not list(storage.rglob(".*seed-*"))  # no temporary files left

    again = seedmod.seed(str(bundle), str(storage), "auto")
    assert again["changed"] is False
    assert again["blobs_linked"] == again["blobs_copied"] == again["links_written"] == 0


def test_check_mode_writes_nothing(tmp_path: Path):
    bundle = tmp_path / "bundle"
    small_image_set(bundle).write()
    res = seedmod.seed(str(bundle), str(tmp_path / "storage"), check_mode=True)
    assert res["changed"] is True
    assert not (tmp_path / "storage").exists()


@needs_registry
def test_real_registry_serves_seeded_images(seeded, registry):
    _, _, writer, _ = seeded
    reg, _ = registry
    for art in _images(writer):
        img = art["image"]
        repo, tag = seedmod.split_reference(img["reference"])
        # by digest, authenticated, OCI Accept: exact bytes
        status, headers, body = reg.get(f"/v2/{repo}/manifests/{img['manifest_digest']}")
        assert status == 200, body
        assert "sha256:" + hashlib.sha256(body).hexdigest() == img["manifest_digest"]
        assert headers.get("Docker-Content-Digest") == img["manifest_digest"]
        # by tag: the tag links resolve to the same manifest
        status, headers, _ = reg.get(f"/v2/{repo}/manifests/{tag}")
        assert status == 200 and headers.get("Docker-Content-Digest") == img["manifest_digest"]
        # config blob (needs its _layers link) and every layer
        for d in [img["config_digest"], *img["layers"]]:
            status, _, data = reg.get(f"/v2/{repo}/blobs/{d}", accept=None)
            assert status == 200 and digest(data) == d, (repo, d, status)
    # The registry 2.8 pitfall the role documents: no OCI Accept type -> 404 for OCI manifests.
    pause = _images(writer)[0]["image"]["manifest_digest"]
    status, _, body = reg.get(
        f"/v2/pause/manifests/{pause}", accept="application/vnd.docker.distribution.manifest.v2+json"
    )
    assert status == 404, body
    status, _, body = reg.get("/v2/_catalog", accept=None)
    assert json.loads(body)["repositories"] == ["flannel/flannel", "library/busybox", "pause"]


@needs_registry
def test_real_registry_refuses_anonymous(registry):
    reg, _ = registry
    status, _, _ = reg.get("/v2/pause/blobs/uploads/", accept=None, auth=False, method="POST")
    assert status == 401
    status, _, _ = reg.get("/v2/pause/manifests/3.6", auth=False)
    assert status == 401


@needs_registry
@pytest.mark.skipif(not shutil.which("skopeo"), reason="skopeo not installed")
def test_skopeo_inspects_a_seeded_image(seeded, registry):
    _, port = registry
    r = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--creds", f"{USER}:{PASSWORD}",
         f"docker://127.0.0.1:{port}/pause:3.6"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["Digest"] == _images(seeded[2])[0]["image"]["manifest_digest"]


@needs_registry
@pytest.mark.skipif(not shutil.which("skopeo"), reason="skopeo not installed")
def test_the_nodes_credential_pulls_but_cannot_push(seeded, registry, tmp_path: Path):
    """The system registry is read-only: the credential every node holds pulls, and an
    authenticated push with it is refused, new repository or existing tag alike."""
    _, port = registry
    creds = f"{USER}:{PASSWORD}"
    pulled = tmp_path / "pulled"
    pull = subprocess.run(
        ["skopeo", "copy", "--src-tls-verify=false", "--src-creds", creds,
         f"docker://127.0.0.1:{port}/pause:3.6", f"oci:{pulled}:pause"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert pull.returncode == 0, pull.stderr
    for target in ("pause:3.6", "evil/pause:latest"):
        push = subprocess.run(
            ["skopeo", "copy", "--dest-tls-verify=false", "--dest-creds", creds,
             f"oci:{pulled}:pause", f"docker://127.0.0.1:{port}/{target}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert push.returncode != 0, f"push to {target} was accepted"
        assert "405" in push.stderr, push.stderr  # Method not allowed: storage is read-only
    reg, _ = registry
    status, _, _ = reg.get("/v2/evil/pause/tags/list")
    assert status == 404  # nothing of the refused push landed


@needs_registry
def test_reseeding_a_running_read_only_registry_serves_the_new_image(seeded, registry, tmp_path: Path):
    """A bundle update adds an image: seeding writes storage under the running (read-only)
    registry, and the new image is served without a restart."""
    bundle, storage, writer, _ = seeded
    reg, _ = registry
    assert reg.get("/v2/library/newimage/manifests/1.0")[0] == 404
    base = layer_tar({"new": b"new image\n"})
    writer.add_image("newimage", "docker.io/library/newimage:1.0", [base])
    writer.write()
    second = seedmod.seed(str(bundle), str(storage), "auto")
    assert second["changed"]
    status, headers, body = reg.get("/v2/library/newimage/manifests/1.0")
    assert status == 200, body[:300]
    assert headers["Docker-Content-Digest"] == _images(writer)[-1]["image"]["manifest_digest"]


def test_seed_copy_mode_is_verified_and_fsynced(tmp_path: Path):
    bundle = tmp_path / "bundle"
    writer = small_image_set(bundle)
    writer.write()
    res = seedmod.seed(str(bundle), str(tmp_path / "storage"), "copy")
    assert res["blobs_linked"] == 0 and res["blobs_copied"] > 0
    # a corrupt bundle blob is named, and no half-written data is left in the store
    victim = _images(writer)[1]["image"]["layers"][1]
    path = bundle / "blobs/sha256" / victim[7:]
    path.write_bytes(b"X" * path.stat().st_size)
    with pytest.raises(seedmod.SeedError, match=victim):
        seedmod.seed(str(bundle), str(tmp_path / "storage2"), "copy")
    assert not list((tmp_path / "storage2").rglob(".*seed-*"))
    assert (
        not (tmp_path / "storage2/docker/registry/v2/blobs/sha256" / victim[7:9] / victim[7:])
        .joinpath("data")
        .exists()
    )


# ---------------------------------------------------------------------------------------------
# bundle_sync: copying the bundle from the USB stick
# ---------------------------------------------------------------------------------------------
def test_bundle_sync_copies_verifies_and_is_idempotent(tmp_path: Path):
    src = tmp_path / "usb"
    small_image_set(src, chunk=16 * 1024).write()
    dest = tmp_path / "srv"
    res = syncmod.sync(str(src), str(dest))
    assert res["changed"] is True and res["copied"] > 0
    for p in (src / "blobs/sha256").iterdir():
        assert (dest / "blobs/sha256" / p.name).read_bytes() == p.read_bytes()
    assert (dest / "manifest.json").read_bytes() == (src / "manifest.json").read_bytes()
    assert (dest / "manifest.sig").is_file()
    assert not any((dest / ".staging").iterdir())
    again = syncmod.sync(str(src), str(dest))
    assert again["changed"] is False and again["copied"] == 0


def test_bundle_sync_names_a_corrupt_blob_and_leaves_nothing_half_written(tmp_path: Path):
    src = tmp_path / "usb"
    writer = small_image_set(src)
    writer.write()
    victim = _images(writer)[0]["image"]["config_digest"][7:]
    blob = src / "blobs/sha256" / victim
    blob.write_bytes(b"\0" * blob.stat().st_size)  # same size, wrong content
    dest = tmp_path / "srv"
    with pytest.raises(syncmod.SyncError) as exc:
        syncmod.sync(str(src), str(dest))
    assert victim in str(exc.value) and "oci-image/pause" in str(exc.value)
    assert not (dest / "blobs/sha256" / victim).exists()
    assert not (dest / "manifest.json").exists()  # an incomplete copy is never a bundle
    assert not any((dest / ".staging").iterdir())
    good = [p.name for p in (src / "blobs/sha256").iterdir() if p.name != victim]
    assert all((dest / "blobs/sha256" / n).is_file() for n in good)  # finished blobs are kept


def test_bundle_sync_refuses_without_space(tmp_path: Path, monkeypatch):
    src = tmp_path / "usb"
    small_image_set(src).write()
    monkeypatch.setattr(syncmod, "free_bytes", lambda path: 10)
    with pytest.raises(
        syncmod.SyncError, match=r"not enough free space on .*srv.*: the bundle needs [\d.]+ MiB more"
    ):
        syncmod.sync(str(src), str(tmp_path / "srv"))
    assert not (tmp_path / "srv/blobs").exists()


def test_bundle_sync_refuses_a_manifest_other_than_the_verified_one(tmp_path: Path):
    """`appliance install` verified one manifest on the controller; the master copies only that one."""
    src = tmp_path / "usb"
    small_image_set(src).write()
    verified = hashlib.sha256((src / "manifest.json").read_bytes()).hexdigest()
    other = "0" * 64
    with pytest.raises(syncmod.SyncError, match=r"manifest\.json is not the bundle the controller verified"):
        syncmod.sync(str(src), str(tmp_path / "srv"), expect_manifest_sha256=other)
    assert not (tmp_path / "srv").exists()  # refused before anything was copied
    res = syncmod.sync(str(src), str(tmp_path / "srv"), expect_manifest_sha256=verified)
    assert res["copied"] > 0 and (tmp_path / "srv/manifest.json").is_file()


def test_a_blob_replaced_in_the_bundle_is_linked_again_not_left_stale(seeded):
    """A layer hard-linked into the store goes bad in place (the store's `data` is the same inode,
    so it goes bad too); the bundle's file is then replaced by a good one, a new inode (the blob
    removed and copied again from the stick, as the install's hint says, or a newer bundle). The
    next seed must not keep serving the old inode because its size still matches: it links the
    store's `data` to the bundle's current file."""
    bundle, storage, writer, _ = seeded
    img = _images(writer)[2]["image"]  # busybox: its layer is a single (linked) blob
    d = img["layers"][-1]
    src = bundle / "blobs/sha256" / d[7:]
    data = storage / "docker/registry/v2/blobs/sha256" / d[7:9] / d[7:] / "data"
    assert data.stat().st_ino == src.stat().st_ino
    good = src.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    src.write_bytes(bytes(bad))  # in place: the store's link sees it
    assert digest(data.read_bytes()) != d
    fresh = bundle / "blobs/sha256" / f".{d[7:]}.new"
    fresh.write_bytes(good)
    os.chmod(fresh, 0o644)
    os.replace(fresh, src)  # the bundle's blob is good again, under a new inode
    res = seedmod.seed(str(bundle), str(storage), "auto")
    assert res["changed"] is True and res["blobs_linked"] == 1, res
    assert digest(data.read_bytes()) == d
    assert data.stat().st_ino == src.stat().st_ino
    assert seedmod.seed(str(bundle), str(storage), "auto")["changed"] is False  # and it stays linked
