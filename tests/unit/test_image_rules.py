"""The image-reference rules of appliance_cli/rules/images.py (docker/distribution's grammar: the
first part is a registry host iff it has '.' or ':' or is localhost), and the node-side copy in
registry_seed held to them: that module runs on the master, where appliance_cli is not installed."""

from __future__ import annotations

import pytest

from appliance_cli.rules.images import (
    ImageRef,
    docker_normalized,
    in_registry,
    is_registry_host,
    parse_reference,
    split_host,
    without_host,
)
from tests._support.modules import load_role_module

DIGEST = "sha256:" + "b" * 64
REG = "10.0.0.1:5000"

CASES = [
    ("localhost:5000/x", ImageRef("localhost:5000", "x", None, None)),
    ("localhost/app:1", ImageRef("localhost", "app", "1", None)),
    ("registry.k8s.io/pause:3.6", ImageRef("registry.k8s.io", "pause", "3.6", None)),
    (
        "registry.k8s.io/coredns/coredns:v1.8.6",
        ImageRef("registry.k8s.io", "coredns/coredns", "v1.8.6", None),
    ),
    (
        "nvcr.io:443/nvidia/gpu-operator:v24.6.2",
        ImageRef("nvcr.io:443", "nvidia/gpu-operator", "v24.6.2", None),
    ),
    ("nvidia/cuda:12", ImageRef("", "nvidia/cuda", "12", None)),
    ("busybox", ImageRef("", "busybox", None, None)),
    ("busybox:1.36", ImageRef("", "busybox", "1.36", None)),
    (f"busybox@{DIGEST}", ImageRef("", "busybox", None, DIGEST)),
    (f"quay.io/x/y:1@{DIGEST}", ImageRef("quay.io", "x/y", "1", DIGEST)),
    (f"localhost:5000/x@{DIGEST}", ImageRef("localhost:5000", "x", None, DIGEST)),
    ("docker.io/library/busybox:1.36", ImageRef("docker.io", "library/busybox", "1.36", None)),
    # one part only: never a host, whatever it looks like (docker reads localhost:5000 as a tag)
    ("localhost:5000", ImageRef("", "localhost", "5000", None)),
    ("my_org/app:1", ImageRef("", "my_org/app", "1", None)),
]


@pytest.mark.parametrize(("reference", "want"), CASES)
def test_parse_reference(reference: str, want: ImageRef) -> None:
    assert parse_reference(reference) == want


def test_the_host_rule() -> None:
    assert [p for p in ("localhost", "a.b", "host:5000", "nvidia", "library", "LOCALHOST") if is_registry_host(p)] == [
        "localhost", "a.b", "host:5000"
    ]  # fmt: skip
    assert split_host("registry.k8s.io/pause:3.6") == ("registry.k8s.io", "pause:3.6")
    assert split_host("nvidia/cuda:12") == ("", "nvidia/cuda:12")
    assert split_host("localhost/") == ("", "localhost/")  # nothing after the host: no host


def test_repository_keeps_the_host_as_written() -> None:
    assert parse_reference(f"registry.k8s.io/pause:3.6@{DIGEST}").repository == "registry.k8s.io/pause"
    assert parse_reference("nvidia/cuda:12").repository == "nvidia/cuda"


def test_moved_to_the_private_registry() -> None:
    assert in_registry("nvcr.io/nvidia/cuda:12", REG) == f"{REG}/nvidia/cuda:12"
    assert in_registry("localhost:5000/x", REG) == f"{REG}/x"
    assert in_registry("nvidia/cuda:12", REG) == f"{REG}/nvidia/cuda:12"
    assert in_registry("busybox", REG) == f"{REG}/busybox"  # as written: no library/ added
    assert without_host("registry.k8s.io/pause:3.6") == "pause:3.6"


def test_docker_normal_form() -> None:
    assert docker_normalized("busybox") == "docker.io/library/busybox"
    assert docker_normalized("busybox:1.36") == "docker.io/library/busybox:1.36"
    assert docker_normalized("nvidia/cuda:12") == "docker.io/nvidia/cuda:12"
    assert docker_normalized("registry.k8s.io/pause:3.6") == "registry.k8s.io/pause:3.6"
    assert docker_normalized("localhost:5000/x") == "localhost:5000/x"


@pytest.mark.parametrize("reference", [r for r, _ in CASES])
def test_registry_seed_names_the_repository_as_the_rule_does(reference: str) -> None:
    """registry_seed's own split (node side) drops the same host and keeps the same tag."""
    seed = load_role_module("registry", "registry_seed")
    ref = parse_reference(reference)
    assert seed.split_reference(reference) == (ref.path, ref.tag)
