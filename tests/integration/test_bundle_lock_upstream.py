"""`bundle lock` then `bundle build` of a production-shaped profile against a local upstream.

The upstream (tests/_support/upstream.py) is real HTTP serving files with their published
checksums and a helm repository index, and the real docker-registry holding multi-arch indexes
pushed by skopeo; the toolkit reaches it only through the --mirror map, as a site with an
internal artifact mirror would. Each kind of upstream lie must stop the run with one line
naming the entry.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from appliance_cli.bundle import BuildOptions, build_bundle, verify_bundle
from appliance_cli.bundle.lock import LockOptions, lock_profile
from appliance_cli.bundle.lockfile import load_lock, lock_path
from appliance_cli.bundle.mirrors import MirrorMap
from appliance_cli.errors import BundleError
from tests._support.upstream import REGISTRY, Upstream, sha256

pytestmark = pytest.mark.skipif(
    not (Path(REGISTRY).exists() and shutil.which("skopeo") and shutil.which("gpg") and shutil.which("gpgv")),
    reason="needs docker-registry, skopeo, gpg and gpgv: scripts/bootstrap.sh installs them",
)

KUBEADM = "https://dl.k8s.io/release/v1.23.17/bin/linux/amd64/kubeadm"
CONTAINERD = (
    "https://github.com/containerd/containerd/releases/download/v1.6.33/containerd-1.6.33-linux-amd64.tar.gz"
)
MANIFEST = "https://github.com/flannel-io/flannel/releases/download/v0.22.3/kube-flannel.yml"
CHART_REPO = "https://nvidia.github.io/gpu-operator/stable"
ARCHIVE = "http://archive.ubuntu.com/ubuntu"
PAUSE = "registry.k8s.io/pause:3.6"
FLANNEL = "docker.io/flannel/flannel:v0.22.3"


@pytest.fixture
def upstream(tmp_path):
    up = Upstream(tmp_path / "upstream").start()
    yield up
    up.stop()


def _chart_bytes(tmp_path: Path, version: str) -> bytes:
    d = tmp_path / "chart-src" / "gpu-operator"
    d.mkdir(parents=True, exist_ok=True)
    (d / "Chart.yaml").write_text(f"apiVersion: v2\nname: gpu-operator\nversion: {version}\n")
    out = tmp_path / "chart.tgz"
    subprocess.run(["tar", "-czf", str(out), "-C", str(d.parent), "gpu-operator"], check=True)
    return out.read_bytes()


def _populate(up: Upstream, tmp_path: Path, lie: str = "") -> None:
    up.publish_file(
        KUBEADM, b"kubeadm v1.23.17\n" * 1000, "sha256", published="0" * 64 if lie == "file" else None
    )
    up.publish_file(CONTAINERD, b"containerd tarball\n" * 500, "sha256sum")
    up.put(MANIFEST, b"kind: List\n")  # nothing published: trust on first use
    chart = _chart_bytes(tmp_path, "v24.6.2")
    up.publish_chart(
        CHART_REPO, "gpu-operator", "v24.6.2", chart, digest="1" * 64 if lie == "chart" else None
    )
    up.push_image(PAUSE)
    up.push_image(FLANNEL, platforms=("arm64",) if lie == "arch" else ("amd64", "arm64"))
    up.publish_apt(ARCHIVE, "focal", [
        ("libc-test", "2.31", {"Priority": "required"}),
        ("runc-test", "1.1", {"Depends": "libc-test"}),
        ("containerd-test", "1.6", {"Depends": "runc-test (>= 1.0), libc-test"}),
    ])  # fmt: skip


def _profile(tmp_path: Path, up: Upstream) -> Path:
    prof = {
        "name": "prod-shaped",
        "production": True,
        "apt": [
            {
                "name": "focal",
                "distro": "ubuntu",
                "codename": "focal",
                "sources": f"deb {ARCHIVE} focal main\n",
                "packages": ["containerd-test"],
                "keyring": up.archive_keyring_spec(),
            }
        ],
        "files": [
            {
                "name": "kubeadm",
                "version": "v1.23.17",
                "url": KUBEADM,
                "checksum_url": f"{KUBEADM}.sha256",
                "mode": "0755",
                "install_path": "/usr/bin/kubeadm",
            },
            {
                "name": "containerd",
                "version": "1.6.33",
                "url": CONTAINERD,
                "checksum_url": f"{CONTAINERD}.sha256sum",
            },
            {"name": "kube-flannel-manifest", "version": "v0.22.3", "url": MANIFEST},
        ],
        "charts": [
            {
                "name": "gpu-operator",
                "version": "v24.6.2",
                "url": f"{CHART_REPO}/gpu-operator-v24.6.2.tgz",
                "repo": CHART_REPO,
                "images": [PAUSE],
            },
        ],
        "images": [{"name": "pause", "reference": PAUSE}, {"name": "flannel", "reference": FLANNEL}],
    }
    path = tmp_path / "profiles" / "prod-shaped.yml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(prof, sort_keys=False))
    return path


def _lock(up: Upstream, profile: Path, tmp_path: Path, **kw):
    return lock_profile(
        LockOptions(profile, MirrorMap.parse(up.mirrors(), env=False), cache=tmp_path / "cache", **kw)
    )


def _build(up: Upstream, profile: Path, tmp_path: Path):
    return build_bundle(
        BuildOptions(
            profile=profile,
            out=tmp_path / "bundle",
            cache=tmp_path / "cache",
            fsync=False,
            mirrors=MirrorMap.parse(up.mirrors(), env=False),
        )
    )


def test_lock_then_build_gives_a_bundle_that_verifies(upstream, tmp_path):
    _populate(upstream, tmp_path)
    profile = _profile(tmp_path, upstream)
    with pytest.raises(BundleError, match=r"prod-shaped: files/kubeadm: not in the lock \(and 6 more\)"):
        _build(upstream, profile, tmp_path)

    res = _lock(upstream, profile, tmp_path)
    assert res.written and len(res.resolved) == 7 and not res.kept
    lock = load_lock(lock_path(profile), "prod-shaped")
    assert lock is not None
    assert {n: e.method for n, e in lock.files.items()} == {
        "kubeadm": "published",
        "containerd": "published",
        "kube-flannel-manifest": "tofu",
    }
    assert lock.charts["gpu-operator"].method == "helm-index"
    assert lock.charts["gpu-operator"].index_url == f"{CHART_REPO}/index.yaml"
    pause = lock.images["pause"]
    assert pause.method == "registry" and pause.reference == PAUSE  # upstream names, not the mirror's
    assert pause.platform_digest == upstream.platform_digest(pause.digest)
    assert "127.0.0.1" not in lock_path(profile).read_text()

    focal = lock.apt["focal"]  # the closure, from the index: what the base system lacks
    assert focal.method == "index" and [(d.name, d.version) for d in focal.debs] == [
        ("containerd-test", "1.6"),
        ("runc-test", "1.1"),
    ]
    assert all(len(d.sha256) == 64 and d.base == ARCHIVE for d in focal.debs)
    assert focal.verified_with == [upstream.archive_key()[1]]  # read through its signed InRelease

    again = _lock(upstream, profile, tmp_path)  # nothing is re-resolved unless asked
    assert not again.written and not again.resolved and len(again.kept) == 7

    built = _build(upstream, profile, tmp_path)
    arts = {a.label: a for a in built.manifest.artifacts}
    assert arts["file/kubeadm"].source.sha256 == lock.files["kubeadm"].sha256
    assert arts["oci-image/pause"].image.source_digest == pause.digest
    assert arts["oci-image/pause"].image.manifest_digest == pause.platform_digest
    debs = sorted(f.path for f in arts["apt-repo/focal"].files if f.path.endswith(".deb"))
    assert debs == ["containerd-test_1.6_amd64.deb", "runc-test_1.1_amd64.deb"]
    verify_bundle(tmp_path / "bundle")


def test_lie_package_differs_from_the_index(upstream, tmp_path):
    """The mirror serves a .deb other than the one its index (and so the lock) lists."""
    _populate(upstream, tmp_path)
    profile = _profile(tmp_path, upstream)
    _lock(upstream, profile, tmp_path)
    upstream.apt_pool_file(ARCHIVE, "focal", "runc-test").write_bytes(b"not the indexed package")
    with pytest.raises(
        BundleError,
        match=r"^apt-repo/focal: runc-test 1.1: \S+ has sha256 [0-9a-f]{64} \(23 bytes\); the index says [0-9a-f]{64}",
    ):
        _build(upstream, profile, tmp_path)


def test_lie_file_differs_from_its_published_checksum(upstream, tmp_path):
    _populate(upstream, tmp_path, lie="file")
    profile = _profile(tmp_path, upstream)
    with pytest.raises(
        BundleError,
        match=r"^files/kubeadm: the download of \S+ has sha256 [0-9a-f]{64}, upstream publishes 0{64}",
    ):
        _lock(upstream, profile, tmp_path)
    assert not lock_path(profile).exists()  # nothing locked


def test_lie_chart_differs_from_its_helm_index_digest(upstream, tmp_path):
    _populate(upstream, tmp_path, lie="chart")
    with pytest.raises(
        BundleError, match=r"^charts/gpu-operator: .* the helm repository's index publishes 1{64}"
    ):
        _lock(upstream, _profile(tmp_path, upstream), tmp_path)


def test_lie_index_without_an_amd64_image(upstream, tmp_path):
    _populate(upstream, tmp_path, lie="arch")
    with pytest.raises(
        BundleError,
        match=r"^images/flannel: the index sha256:\S+ has no linux/amd64 image \(it has linux/arm64\)",
    ):
        _lock(upstream, _profile(tmp_path, upstream), tmp_path)


def test_lie_tag_moved_after_locking(upstream, tmp_path):
    """A moved tag changes nothing the build takes (it pulls the locked digest); `lock --check`
    reports it, naming the entry, and only `--update NAME` moves the lock."""
    _populate(upstream, tmp_path)
    profile = _profile(tmp_path, upstream)
    _lock(upstream, profile, tmp_path)
    locked = load_lock(lock_path(profile), "prod-shaped").images["pause"].digest
    moved = upstream.push_image(PAUSE, salt="rebuilt")
    assert moved != locked

    check = _lock(upstream, profile, tmp_path, check=True)
    assert check.drift == [
        f"images/pause: {PAUSE} now resolves to {moved}, the lock holds {locked} (the tag moved after locking)"
    ]
    built = _build(upstream, profile, tmp_path)  # the build never asks the tag
    pause = next(a for a in built.manifest.artifacts if a.name == "pause")
    assert pause.image.source_digest == locked

    _lock(upstream, profile, tmp_path, update=["pause"])
    assert load_lock(lock_path(profile), "prod-shaped").images["pause"].digest == moved


def test_cli_lock_check_exits_4_naming_the_moved_entry(upstream, tmp_path):
    _populate(upstream, tmp_path)
    profile = _profile(tmp_path, upstream)
    mirrors = [a for m in upstream.mirrors() for a in ("--mirror", m)]
    cmd = [
        sys.executable,
        "-m",
        "appliance_cli",
        "bundle",
        "lock",
        "--profile",
        str(profile),
        "--cache",
        str(tmp_path / "cache"),
        *mirrors,
    ]
    first = subprocess.run(cmd, capture_output=True, text=True, env={"CI": "1", "PATH": "/usr/bin:/bin"})
    assert first.returncode == 0, first.stderr
    assert (
        "7 resolved, 0 kept as locked; by method: 1 helm-index, 1 index, 2 published, 2 registry, 1 tofu"
        in first.stdout
    )
    upstream.push_image(FLANNEL, salt="rebuilt")
    r = subprocess.run(
        [*cmd, "--check"], capture_output=True, text=True, env={"CI": "1", "PATH": "/usr/bin:/bin"}
    )
    assert r.returncode == 4 and "Traceback" not in r.stderr
    assert "images/flannel: docker.io/flannel/flannel:v0.22.3 now resolves to" in r.stderr
    assert "1 entry differs from upstream now" in r.stderr


def test_a_profile_entry_changed_after_locking_is_refused_by_the_build(upstream, tmp_path):
    _populate(upstream, tmp_path)
    profile = _profile(tmp_path, upstream)
    _lock(upstream, profile, tmp_path)
    data = yaml.safe_load(profile.read_text())
    data["images"][0]["reference"] = "registry.k8s.io/pause:3.7"
    profile.write_text(yaml.safe_dump(data))
    with pytest.raises(
        BundleError,
        match=r"images/pause: the lock holds registry.k8s.io/pause:3.6, the profile asks for registry.k8s.io/pause:3.7; run `appliance bundle lock --profile prod-shaped --update pause`",
    ):
        _build(upstream, profile, tmp_path)


def test_the_published_hash_is_read_from_sha256sum_lines(upstream, tmp_path):
    _populate(upstream, tmp_path)
    _lock(upstream, profile := _profile(tmp_path, upstream), tmp_path)
    containerd = load_lock(lock_path(profile), "prod-shaped").files["containerd"]
    assert containerd.sha256 == sha256(b"containerd tarball\n" * 500)
    assert containerd.checksum_url == f"{CONTAINERD}.sha256sum"


def test_a_reviewed_index_digest_is_completed_by_reading_that_digest_not_the_tag(upstream, tmp_path):
    """PINS.md gives index digests only: `bundle lock` adds the amd64 manifest digest by reading
    the locked digest, keeps the method and source, and leaves the tag alone even if it moved."""
    from appliance_cli.bundle.lockfile import ImageLock, write_lock

    _populate(upstream, tmp_path)
    profile = _profile(tmp_path, upstream)
    _lock(upstream, profile, tmp_path)
    lock = load_lock(lock_path(profile), "prod-shaped")
    reviewed = lock.images["pause"].digest
    lock.images["pause"] = ImageLock(
        reference=PAUSE, digest=reviewed, method="reviewed", source="a promoter manifest"
    )
    write_lock(lock_path(profile), lock)
    upstream.push_image(PAUSE, salt="moved")  # the tag moves; the reviewed digest stays served

    res = _lock(upstream, profile, tmp_path)
    assert res.resolved == ["images/pause"]
    pause = load_lock(lock_path(profile), "prod-shaped").images["pause"]
    assert (pause.digest, pause.method, pause.source) == (reviewed, "reviewed", "a promoter manifest")
    assert pause.platform_digest == upstream.platform_digest(reviewed)


def test_the_build_checks_the_amd64_manifest_against_the_lock(upstream, tmp_path):
    _populate(upstream, tmp_path)
    profile = _profile(tmp_path, upstream)
    _lock(upstream, profile, tmp_path)
    text = lock_path(profile).read_text()
    lock = load_lock(lock_path(profile), "prod-shaped")
    wrong = "sha256:" + "e" * 64
    lock_path(profile).write_text(text.replace(lock.images["flannel"].platform_digest, wrong))
    with pytest.raises(
        BundleError,
        match=rf"^oci-image/flannel: the linux/amd64 manifest pulled is sha256:\S+, the lock records {wrong}",
    ):
        _build(upstream, profile, tmp_path)


def test_update_of_an_unknown_entry_is_a_usage_error(upstream, tmp_path):
    from appliance_cli.errors import UsageError

    with pytest.raises(UsageError, match=r"--update kubeadmm: no entry of that name in profile prod-shaped"):
        _lock(upstream, _profile(tmp_path, upstream), tmp_path, update=["kubeadmm"])
