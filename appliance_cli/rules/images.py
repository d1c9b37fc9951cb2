"""Image references, as docker/distribution's reference grammar reads them:

    [HOST[:PORT]/]PATH[:TAG][@DIGEST]

The first `/`-separated part is a registry host when it contains '.' or ':' or is 'localhost';
otherwise it is part of the path (docker.io implied). A tag is a ':' in the last part, a digest
follows '@'. Nothing here validates: the registry_seed module refuses what the registry would.
(registry_seed runs on the master, where this package is not installed: its own copy of the
host rule is held to this one by tests/unit/test_image_rules.py.)"""

from __future__ import annotations

from dataclasses import dataclass

DOCKER_HUB = "docker.io"


def is_registry_host(part: str) -> bool:
    """Is this first part of a reference a registry host (docker/distribution's rule)?"""
    return "." in part or ":" in part or part == "localhost"


def split_host(reference: str) -> tuple[str, str]:
    """registry.k8s.io/pause:3.6 -> ('registry.k8s.io', 'pause:3.6'); nvidia/cuda:12 ->
    ('', 'nvidia/cuda:12'): a one-part reference never has a host."""
    first, _, rest = reference.partition("/")
    if rest and is_registry_host(first):
        return first, rest
    return "", reference


@dataclass(frozen=True)
class ImageRef:
    host: str  # '' when the reference names none (docker.io implied)
    path: str
    tag: str | None
    digest: str | None

    @property
    def repository(self) -> str:
        """The name as written, without tag or digest: registry.k8s.io/pause."""
        return f"{self.host}/{self.path}" if self.host else self.path


def parse_reference(reference: str) -> ImageRef:
    """localhost:5000/x:1@sha256:… -> ImageRef('localhost:5000', 'x', '1', 'sha256:…')."""
    name, _, digest = reference.partition("@")
    tag = None
    if ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
    host, path = split_host(name)
    return ImageRef(host, path, tag, digest or None)


def without_host(reference: str) -> str:
    """registry.k8s.io/pause:3.6 -> pause:3.6: what registry_seed names the repository."""
    return split_host(reference)[1]


def in_registry(reference: str, registry: str) -> str:
    """nvcr.io/nvidia/cuda:12 -> REGISTRY/nvidia/cuda:12: the host replaced by `registry`, the
    path kept as written (a bare name gains no library/)."""
    return f"{registry}/{without_host(reference)}"


def docker_normalized(reference: str) -> str:
    """As a container runtime reads a reference: busybox -> docker.io/library/busybox,
    nvidia/cuda:12 -> docker.io/nvidia/cuda:12; one that names its host is kept."""
    first, sep, _ = reference.partition("/")
    if not sep:
        return f"{DOCKER_HUB}/library/{reference}"
    return reference if is_registry_host(first) else f"{DOCKER_HUB}/{reference}"
