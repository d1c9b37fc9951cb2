"""The GPU Operator release's values and the images it will pull, as pure functions (tested in
plain pytest: tests/unit/test_gpu_operator_values.py). Runs on the controller.

Values: the appliance's values file for the chart version (bundles/values/gpu-operator-<v>.yaml,
upstream image names) with every component's `repository` moved to the private registry (the
registry keeps the upstream path minus its host, as registry_seed names it), and the site's
choices on top: the runtime, the driver in a container (with the bundle's apt repository for
linux-headers) or on the hosts, and MIG.

Images: what the chart will make nodes pull with those values over the chart's own values.yaml
(`helm show values`): every enabled component with repository/image/version, the driver's tag
with the node's OS appended as the operator does (550.90.07 -> 550.90.07-ubuntu20.04), and the
node-feature-discovery subchart's image.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from appliance_cli.rules.helmvalues import coalesce
from appliance_cli.rules.images import in_registry

# Components that deploy only with sandboxWorkloads.enabled (VMs, vGPU, Kata, confidential).
SANDBOX_ONLY = (
    "vgpuManager",
    "vgpuDeviceManager",
    "vfioManager",
    "sandboxDevicePlugin",
    "kataManager",
    "ccManager",
)
NFD = "node-feature-discovery"


class GpuValuesError(ValueError):
    """A values file the role cannot use; the message names the key."""


def _plain(data: Any) -> Any:
    """Plain dicts, lists and strings: ansible-core 2.19 hands filters tagged objects (origin and
    trust), and copying a tree of those took seconds; a JSON round trip drops the tags."""
    return json.loads(json.dumps(data))


def private_repository(repository: str, registry: str) -> str:
    """nvcr.io/nvidia/cloud-native -> REGISTRY/nvidia/cloud-native (the host dropped as
    registry_seed drops it: appliance_cli/rules/images.py)."""
    return in_registry(repository, registry)


def _components(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(key path, mapping) of every mapping with repository + image, NFD's subchart excluded."""
    if not isinstance(node, dict):
        return
    if {"repository", "image"} <= node.keys():
        yield path, node
    for k, v in node.items():
        if k != NFD:
            yield from _components(v, f"{path}.{k}" if path else k)


def _privatise(values: dict[str, Any], registry: str) -> None:
    for key, comp in _components(values):
        if comp.get("repository"):
            comp["repository"] = private_repository(str(comp["repository"]), registry)
        elif comp.get("enabled") is not False:
            raise GpuValuesError(f"gpu-operator values: {key}.repository is empty (the chart has no default)")
    nfd_image = (values.get(NFD) or {}).get("image") or {}
    if nfd_image.get("repository"):
        nfd_image["repository"] = private_repository(str(nfd_image["repository"]), registry)


def gpu_operator_values(
    base: Mapping[str, Any],
    registry: str,
    runtime: str = "containerd",
    driver: str = "container",
    mig_strategy: str = "none",
    driver_repo_configmap: str = "",
    device_plugin: bool = True,
    nfd: bool = True,
) -> dict[str, Any]:
    """The release's values: `base` (upstream image names) moved to the private registry, with
    the site's runtime, driver and MIG choices. `device_plugin` false leaves `nvidia.com/gpu` to
    another device plugin (HAMi's, with the open scheduler stack): two would both register it.
    `nfd` false: the site runs its own Node Feature Discovery, and the chart deploys none."""
    if driver not in ("container", "host"):
        raise GpuValuesError(f"gpu.driver: '{driver}' is not container or host")
    if mig_strategy not in ("none", "single", "mixed"):
        raise GpuValuesError(f"gpu.mig.strategy: '{mig_strategy}' is not none, single or mixed")
    values: dict[str, Any] = _plain(dict(base))
    _privatise(values, registry)
    values.setdefault("operator", {})["defaultRuntime"] = runtime
    drv = values.setdefault("driver", {})
    drv["enabled"] = driver == "container"
    drv.pop("osTag", None)  # ours, not the chart's: the operator reads the node's OS itself
    if driver == "container" and driver_repo_configmap:
        drv["repoConfig"] = {"configMapName": driver_repo_configmap}
    else:
        drv.pop("repoConfig", None)
    values["mig"] = {"strategy": mig_strategy}
    # mig-manager only when the site asks for fixed partitions: with none the GPUs stay whole
    values.setdefault("migManager", {})["enabled"] = mig_strategy != "none"
    values.setdefault("devicePlugin", {})["enabled"] = bool(device_plugin)
    values.setdefault("nfd", {})["enabled"] = bool(nfd)
    return values


def _enabled(values: Mapping[str, Any], key: str) -> bool:
    node: Any = values
    for part in key.split("."):
        if not isinstance(node, Mapping) or node.get("enabled") is False:
            return False
        node = node.get(part)
    return not (isinstance(node, Mapping) and node.get("enabled") is False)


def gpu_operator_images(
    values: Mapping[str, Any], chart_values: Mapping[str, Any] | None = None, node_os: str = ""
) -> list[dict[str, str]]:
    """[{key, reference}] of every image the release pulls: `values` over the chart's values.yaml.

    node_os: the GPU nodes' OS as the operator names it (ubuntu20.04), appended to the driver's
    tag; required when the driver runs in a container."""
    merged = coalesce(_plain(chart_values or {}), _plain(values))
    sandbox = bool((merged.get("sandboxWorkloads") or {}).get("enabled"))
    out: list[dict[str, str]] = []
    for key, comp in _components(merged):
        if not _enabled(merged, key) or (not sandbox and key.split(".")[0] in SANDBOX_ONLY):
            continue
        if not comp.get("version"):
            raise GpuValuesError(
                f"gpu-operator values: {key}.version is not set (the tag would be the chart's appVersion): set it"
            )
        tag = str(comp["version"])
        if key == "driver":
            if not node_os:
                raise GpuValuesError(
                    "gpu-operator values: the driver runs in a container but the GPU nodes' OS is unknown"
                )
            tag = f"{tag}-{node_os}"
        out.append({"key": key, "reference": f"{comp['repository']}/{comp['image']}:{tag}"})
    nfd_on = (merged.get("nfd") or {}).get("enabled", True) is not False
    nfd_image = (merged.get(NFD) or {}).get("image") or {}
    if nfd_on:
        if not nfd_image.get("repository") or not nfd_image.get("tag"):
            raise GpuValuesError(
                f"gpu-operator values: {NFD}.image.repository and .tag must be set (the subchart's default "
                "pulls from registry.k8s.io)"
            )
        out.append({"key": f"{NFD}.image", "reference": f"{nfd_image['repository']}:{nfd_image['tag']}"})
    seen: set[str] = set()
    return [i for i in out if not (i["reference"] in seen or seen.add(i["reference"]))]  # type: ignore[func-returns-value]


def node_os_name(facts: Mapping[str, Any]) -> str:
    """The OS suffix the operator appends to the driver tag: ubuntu20.04, rhel8.8, ..."""
    dist = str(facts.get("distribution") or "").lower()
    version = str(facts.get("distribution_version") or "")
    return f"{dist}{version}" if dist and version else ""


def missing_headers(results: list[Mapping[str, Any]]) -> list[str]:
    """'node: linux-headers-KERNEL' for each node whose apt (the bundle's repository only) has no
    candidate for its running kernel's headers. Each result's stdout: the candidate (or
    '(none)', or nothing), then `uname -r`."""
    out = []
    for r in results:
        lines = [ln.strip() for ln in r.get("stdout_lines") or []] if not r.get("skipped") else None
        if not lines:
            continue
        kernel, candidate = lines[-1], (lines[0] if len(lines) > 1 else "")
        if not candidate or candidate == "(none)":
            out.append(f"{r.get('item')}: linux-headers-{kernel}")
    return out


def gpu_shortfall(nodes_json: str, expected: Mapping[str, int], skip: list[str] | None = None) -> list[str]:
    """'node: nvidia.com/gpu allocatable N, its hardware class has M' for each GPU node (not in
    `skip`) whose allocatable GPUs differ from its class; `nodes_json`: kubectl get nodes -o json."""

    items = {i["metadata"]["name"]: i for i in (json.loads(nodes_json or "{}").get("items") or [])}
    out = []
    for node, want in expected.items():
        if node in (skip or []):
            continue
        if node not in items:
            out.append(f"{node}: not a node of the cluster")
            continue
        have = str(((items[node].get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu", "0"))
        if have != str(want):
            out.append(f"{node}: nvidia.com/gpu allocatable {have}, its hardware class has {want}")
    return out


def container_nodes(nodes: list[str], hostvars: Mapping[str, Any], types: list[str]) -> list[str]:
    """The nodes whose facts say they are containers (no GPUs of their own)."""
    out = []
    for n in nodes:
        facts = (hostvars.get(n) or {}).get("ansible_facts") or {}
        if facts.get("virtualization_type") in types:
            out.append(n)
    return out


def container_warnings(nodes: list[str], expected: Mapping[str, int]) -> list[str]:
    return [
        f"{n}: nvidia.com/gpu allocatable not checked: a container node has no GPUs "
        f"(its hardware class expects {expected.get(n, '?')})"
        for n in nodes
    ]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "gpu_operator_values": gpu_operator_values,
            "gpu_operator_images": gpu_operator_images,
            "gpu_operator_node_os": node_os_name,
            "gpu_operator_missing_headers": missing_headers,
            "gpu_operator_gpu_shortfall": gpu_shortfall,
            "gpu_operator_container_nodes": container_nodes,
            "gpu_operator_container_warnings": container_warnings,
        }
