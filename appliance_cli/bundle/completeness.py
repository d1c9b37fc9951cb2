"""Is a profile complete: does it hold every image the roles will pull, each overridden to the
private registry?

What is pulled is rendered, not listed by hand:
* kubeadm's images for the version and repositories the control_plane role configures (kubeadm
  1.23's own rules: pause 3.6, etcd 3.5.6-0, CoreDNS v1.8.6 under <repository>/coredns; 1.24's
  pause is 3.7);
* the sandbox image of container_runtime and the flannel images of cni_flannel, from their role
  defaults rendered with a private registry address;
* every image key of each chart's values: the chart's own values.yaml (read from the chart
  archive when one is given) with the appliance's values file (`values_file:`) over it, as helm
  merges them, for the components that stay enabled.

"Overridden" means the appliance's values file sets that key's repository (or whole image)
itself: the role that installs the chart rewrites those to the private registry, and a key left
at the chart's default would make a node pull from the internet. The registry keeps upstream
paths (registry_seed: the reference minus its host), so a pull of <registry>/<path>:<tag> is
served when the profile lists <upstream host>/<path>:<tag>.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml

from appliance_cli.bundle.profile import ChartSpec, Profile
from appliance_cli.content import content_root
from appliance_cli.errors import BundleError
from appliance_cli.rules.helmvalues import coalesce
from appliance_cli.rules.images import docker_normalized, without_host

PRIVATE = "appliance-registry.invalid:5000"  # stands for appliance_registry_address
KUBEADM_123 = {"pause": "3.6", "etcd": "3.5.6-0", "coredns": "v1.8.6"}  # kubeadm 1.23 constants
# kubeadm's constants per minor (`kubeadm config images list` of the last patch): 1.24 pulls pause 3.7.
# A minor not listed is checked with 1.23's.
KUBEADM_IMAGES = {(1, 23): KUBEADM_123, (1, 24): {"pause": "3.7", "etcd": "3.5.6-0", "coredns": "v1.8.6"}}


def kubeadm_constants(version: str) -> dict[str, str]:
    parts = version.lstrip("v").split(".")
    minor = (
        (int(parts[0]), int(parts[1])) if len(parts) > 1 and all(p.isdigit() for p in parts[:2]) else (1, 23)
    )
    return KUBEADM_IMAGES.get(minor, KUBEADM_123)


NODE_OS = "ubuntu20.04"  # the GPU Operator's driver tag suffix for the appliance nodes


@dataclass(frozen=True)
class Pull:
    source: str  # role or chart
    key: str  # role variable or values key path
    reference: str  # what is pulled, with its upstream (or the private) registry host
    overridden: bool  # the appliance sets it to the private registry
    listed: bool  # the profile holds its <path>:<tag>

    @property
    def ok(self) -> bool:
        return self.overridden and self.listed


@dataclass
class Completeness:
    profile: str
    pulls: list[Pull] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        out = []
        for p in self.pulls:
            if not p.overridden:
                out.append(f"{p.source}: {p.key} = {p.reference} is not overridden to the private registry")
            elif not p.listed:
                out.append(
                    f"{p.source}: {p.key} pulls {path_of(p.reference)}, which profile {self.profile} lacks"
                )
        return out


def path_of(reference: str) -> str:
    """registry.k8s.io/pause:3.6 -> pause:3.6 (what registry_seed names the repository)."""
    return without_host(reference)


# -- the roles ---------------------------------------------------------------------------------
def _role_defaults(*roles: str, site: dict[str, Any]) -> dict[str, Any]:
    """The roles' defaults rendered with the site's variables (Jinja, to a fixed point)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    raw: dict[str, Any] = {}
    for role in roles:
        raw.update(
            yaml.safe_load((content_root() / "roles" / role / "defaults" / "main.yml").read_text()) or {}
        )
    done: dict[str, Any] = dict(site)
    for _ in range(5):
        for k, v in raw.items():
            if isinstance(v, str) and k not in done:
                try:
                    done[k] = env.from_string(v).render(done)
                except (jinja2.UndefinedError, jinja2.TemplateAssertionError):
                    continue  # undefined yet, or a role's own filter (control_plane_oidc_flags): no image
    return done


def role_pulls(version: str) -> Iterator[tuple[str, str, str]]:
    """(role, variable, reference) for every image the roles make nodes pull."""
    site = {
        "appliance_registry_address": PRIVATE,
        "appliance_kubernetes_version": version,
        "appliance_cri_socket": "",
    }
    d = _role_defaults("control_plane", "container_runtime", "cni_flannel", site=site)
    repo, dns = d["control_plane_image_repository"], d["control_plane_dns_image_repository"]
    ver = d["control_plane_kubernetes_version"]
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"):
        yield "control_plane (kubeadm)", "control_plane_image_repository", f"{repo}/{name}:{ver}"
    consts = kubeadm_constants(ver)
    yield "control_plane (kubeadm)", "control_plane_image_repository", f"{repo}/pause:{consts['pause']}"
    yield "control_plane (kubeadm)", "control_plane_image_repository", f"{repo}/etcd:{consts['etcd']}"
    yield (
        "control_plane (kubeadm)",
        "control_plane_dns_image_repository",
        f"{dns}/coredns:{consts['coredns']}",
    )
    yield "container_runtime", "container_runtime_sandbox_image", d["container_runtime_sandbox_image"]
    yield "cni_flannel", "cni_flannel_image", f"{d['cni_flannel_image']}:{d['cni_flannel_version']}"
    yield (
        "cni_flannel",
        "cni_flannel_cni_plugin_image",
        (f"{d['cni_flannel_cni_plugin_image']}:{d['cni_flannel_cni_plugin_version']}"),
    )


# -- the charts --------------------------------------------------------------------------------
def _get(d: Any, path: str) -> Any:
    for part in path.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def _gpu_operator(values: dict, app_version: str, cluster: str) -> Iterator[tuple[str, str, str]]:
    """(key, reference, key that must be overridden): components with repository/image/version."""

    def walk(node: Any, path: str) -> Iterator[tuple[str, str, str]]:
        if not isinstance(node, dict) or node.get("enabled") is False:
            return
        if {"repository", "image"} <= node.keys() and node.get("repository"):
            tag = str(node.get("version") or app_version)
            if path == "driver":  # the operator appends the node's OS to the driver's tag
                tag = f"{tag}-{node.get('osTag') or NODE_OS}"
            yield path, f"{node['repository']}/{node['image']}:{tag}", f"{path}.repository"
        for k, v in node.items():
            if k != "node-feature-discovery":  # the subchart: its own image shape, below
                yield from walk(v, f"{path}.{k}" if path else k)

    gated = (
        "vgpuManager",
        "vgpuDeviceManager",
        "vfioManager",
        "sandboxDevicePlugin",
        "kataManager",
        "ccManager",
    )
    sandbox = bool(_get(values, "sandboxWorkloads.enabled"))
    for key, ref, must in walk(values, ""):
        if sandbox or key.split(".")[0] not in gated:  # sandbox components deploy only with sandboxWorkloads
            yield key, ref, must
    nfd = values.get("node-feature-discovery") or {}
    if _get(values, "nfd.enabled") is not False and (nfd.get("image") or {}).get("repository"):
        tag = nfd["image"].get("tag") or "v0.16.3"  # the subchart's appVersion
        yield (
            "node-feature-discovery.image",
            f"{nfd['image']['repository']}:{tag}",
            "node-feature-discovery.image.repository",
        )


def _hami(values: dict, app_version: str, cluster: str) -> Iterator[tuple[str, str, str]]:
    version = values.get("version") or app_version
    yield (
        "scheduler.kubeScheduler.image",
        f"{_get(values, 'scheduler.kubeScheduler.image')}:{cluster}",
        "scheduler.kubeScheduler.image",
    )
    yield (
        "scheduler.extender.image",
        f"{_get(values, 'scheduler.extender.image')}:{version}",
        "scheduler.extender.image",
    )
    yield (
        "scheduler.patch.imageNew",
        str(_get(values, "scheduler.patch.imageNew")),
        "scheduler.patch.imageNew",
    )  # k8s >= 1.22
    yield "devicePlugin.image", f"{_get(values, 'devicePlugin.image')}:{version}", "devicePlugin.image"


def _nfs(values: dict, app_version: str, cluster: str) -> Iterator[tuple[str, str, str]]:
    image = values.get("image") or {}
    yield "image", f"{image.get('repository')}:{image.get('tag') or app_version}", "image.repository"


def _volcano(values: dict, app_version: str, cluster: str) -> Iterator[tuple[str, str, str]]:
    """Volcano 1.9 names each image whole: <part>_image_name:image_tag_version (image_registry
    came with 1.10.0, and the 1.9 templates ignore it)."""
    basic = values.get("basic") or {}
    for part in ("controller", "scheduler", "admission"):
        key = f"basic.{part}_image_name"
        yield key, f"{basic.get(f'{part}_image_name')}:{basic.get('image_tag_version')}", key


Extractor = Callable[[dict, str, str], Iterator[tuple[str, str, str]]]
CHARTS: dict[str, Extractor] = {
    "gpu-operator": _gpu_operator,
    "hami": _hami,
    "nfs-subdir-external-provisioner": _nfs,
    "volcano": _volcano,
}


def _normalize(ref: str) -> str:
    """An image string as a container runtime reads it: docker.io is implicit."""
    return docker_normalized(ref)


def chart_defaults(spec: ChartSpec, charts_dir: Path | None) -> tuple[dict, str] | None:
    """(values.yaml, appVersion) from the chart archive `<name>-<version>.tgz` in charts_dir."""
    if charts_dir is None:
        return None
    archive = charts_dir / f"{spec.name}-{spec.version}.tgz"
    if not archive.is_file():
        return None
    try:
        with tarfile.open(archive) as t:
            values = yaml.safe_load(t.extractfile(f"{spec.name}/values.yaml").read()) or {}  # type: ignore[union-attr]
            chart = yaml.safe_load(t.extractfile(f"{spec.name}/Chart.yaml").read()) or {}  # type: ignore[union-attr]
    except (tarfile.TarError, KeyError, AttributeError, yaml.YAMLError) as exc:
        raise BundleError(f"chart {archive}: cannot read values.yaml/Chart.yaml: {exc}") from None
    return values, str(chart.get("appVersion") or spec.version)


def chart_pulls(spec: ChartSpec, charts_dir: Path | None, cluster: str, notes: list[str]) -> Iterator[Pull]:
    extract = CHARTS.get(spec.name)
    if extract is None:
        notes.append(f"chart {spec.name}: no image rules known; its `images:` list is taken as given")
        return
    ours = yaml.safe_load((content_root() / spec.values_file).read_text()) if spec.values_file else {}
    defaults = chart_defaults(spec, charts_dir)
    if defaults is None:
        notes.append(f"chart {spec.name} {spec.version}: archive not given, only its values file is checked")
        values, app = ours or {}, str(spec.version)
    else:
        values, app = coalesce(defaults[0], ours or {}), defaults[1]
    for key, ref, must in extract(values, app, cluster):
        if "None" in ref.split(":")[0]:
            continue  # a component without an image in these values
        yield Pull(f"chart {spec.name}", key, _normalize(ref), _get(ours or {}, must) is not None, False)


def check_profile(prof: Profile, charts_dir: Path | None = None, version: str = "v1.23.17") -> Completeness:
    listed = {path_of(i.reference) for i in prof.images}
    out = Completeness(prof.name)
    for source, key, ref in role_pulls(version):
        out.pulls.append(Pull(source, key, ref, ref.startswith(PRIVATE + "/"), path_of(ref) in listed))
    for chart in prof.charts:
        for p in chart_pulls(chart, charts_dir, version, out.notes):
            out.pulls.append(Pull(p.source, p.key, p.reference, p.overridden, path_of(p.reference) in listed))
    pulled = {path_of(p.reference) for p in out.pulls}
    for image in prof.images:
        if path_of(image.reference) not in pulled:
            out.notes.append(
                f"images/{image.name}: {image.reference} is in the profile, but no role or chart pulls it"
            )
    return out
