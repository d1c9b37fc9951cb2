"""The mirror map and the published-checksum parser: the two places where `bundle lock` turns
upstream names into where it actually reads, and upstream's words into one sha256."""

from __future__ import annotations

import pytest

from appliance_cli.bundle.mirrors import MirrorMap
from appliance_cli.bundle.resolve import parse_published_checksum
from appliance_cli.errors import UsageError


def test_files_go_to_the_mirror_with_their_path_kept() -> None:
    m = MirrorMap.parse(
        ["dl.k8s.io=http://127.0.0.1:8080/dl.k8s.io/", "get.helm.sh=https://mirror.site"], env=False
    )
    assert m.url("https://dl.k8s.io/release/v1.23.17/bin/linux/amd64/kubeadm") == (
        "http://127.0.0.1:8080/dl.k8s.io/release/v1.23.17/bin/linux/amd64/kubeadm"
    )
    assert m.url("https://get.helm.sh/helm-v3.14.4-linux-amd64.tar.gz?x=1") == (
        "https://mirror.site/helm-v3.14.4-linux-amd64.tar.gz?x=1"
    )
    assert m.url("https://github.com/a/b") == "https://github.com/a/b"  # not mapped: unchanged


def test_registries_go_to_the_mirror_with_an_optional_prefix_and_tls_by_scheme() -> None:
    m = MirrorMap.parse(
        ["registry.k8s.io=http://127.0.0.1:5000", "docker.io=https://mirror.site/hub"], env=False
    )
    k8s = m.registry("registry.k8s.io/coredns/coredns")
    assert (k8s.repo, k8s.tls_verify) == ("127.0.0.1:5000/coredns/coredns", False)
    hub = m.registry("docker.io/library/registry")
    assert (hub.repo, hub.tls_verify) == ("mirror.site/hub/library/registry", True)
    nv = m.registry("nvcr.io/nvidia/gpu-operator")
    assert (nv.repo, nv.tls_verify) == ("nvcr.io/nvidia/gpu-operator", True)


def test_the_environment_adds_mirrors(monkeypatch) -> None:
    monkeypatch.setenv(
        "APPLIANCE_BUNDLE_MIRRORS", "nvcr.io=http://10.0.0.9:5000, dl.k8s.io=http://10.0.0.9/k8s"
    )
    m = MirrorMap.parse([])
    assert m.describe() == ["dl.k8s.io -> http://10.0.0.9/k8s", "nvcr.io -> http://10.0.0.9:5000"]


@pytest.mark.parametrize("spec", ["dl.k8s.io", "dl.k8s.io=ftp://x", "=http://x", "a b=http://x", "h=http://"])
def test_a_bad_mirror_is_a_usage_error_naming_it(spec: str) -> None:
    with pytest.raises(UsageError, match=r"^--mirror .*: expected HOST=URL$"):
        MirrorMap.parse([spec], env=False)


def test_published_checksum_formats() -> None:
    h = "a" * 64
    assert parse_published_checksum(f"{h}\n", "kubeadm") == h  # dl.k8s.io: a bare hash
    sums = f"{'b' * 64}  cpython-3.11.9-x.tar.gz\n{h} *cpython-3.11.10-x.tar.gz\n"
    assert parse_published_checksum(sums, "cpython-3.11.10-x.tar.gz") == h  # SHA256SUMS, binary mode
    assert parse_published_checksum(f"{h}  dist/helm.tgz\n", "helm.tgz") == h
    assert parse_published_checksum(sums, "other.tar.gz") is None
    assert parse_published_checksum("<html>not found</html>", "kubeadm") is None
