"""The open scheduler stack (HAMi + Volcano) as pure functions, tested in plain pytest
(tests/unit/test_scheduler_open_values.py). Runs on the controller.

Values: the appliance's values file of each chart version (bundles/values/<chart>-<v>.yaml,
upstream image names) with every image moved to the private registry, as registry_seed names it
(the upstream path minus its host). What the real charts read (hami-2.4.1.tgz; volcano-sh/volcano
installer/helm/chart/volcano at v1.9.0):

  HAMi 2.4.1   scheduler.kubeScheduler.image ":" the cluster's version (no tag key: the chart
               uses .Capabilities.KubeVersion.Version); scheduler.extender.image and
               devicePlugin.image ":" version; scheduler.patch.imageNew (Kubernetes >= 1.22) or
               scheduler.patch.image (older), whole references; the device plugin DaemonSet on
               the nodes matching devicePlugin.nvidianodeSelector.
  Volcano 1.9  basic.<controller|scheduler|admission>_image_name ":" basic.image_tag_version
               (basic.image_registry came with 1.10.0; 1.9 ignores it).

Queues: one Volcano Queue (scheduling.volcano.sh/v1beta1) per project of the site, and the plan
that compares them with the cluster's queues (one `kubectl get queues -o json`): which to apply,
which queues of projects gone from the site to delete (no PodGroup uses them) or keep (warned).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from appliance_cli.rules.helmvalues import coalesce
from appliance_cli.rules.images import in_registry

GPU = "nvidia.com/gpu"
QUEUE_API = "scheduling.volcano.sh/v1beta1"
MANAGED_BY = {"app.kubernetes.io/managed-by": "appliance"}
PROJECT_LABEL = "appliance.io/project"
DEPARTMENT_LABEL = "appliance.io/department"
VOLCANO_PARTS = ("controller", "scheduler", "admission")
# Volcano's own queues: never deleted by the role, whatever their labels (its webhook refuses
# deleting `default`; `root` is the hierarchy's top from 1.10 on).
VOLCANO_QUEUES = ("default", "root")


class SchedulerValuesError(ValueError):
    """Values the role cannot use; the message names the chart and key."""


def _plain(data: Any) -> Any:
    """Plain dicts, lists and strings: ansible-core 2.19 hands filters tagged objects (origin and
    trust); a JSON round trip drops the tags."""
    return json.loads(json.dumps(data))


def private_image(image: str, registry: str) -> str:
    """docker.io/projecthami/hami -> REGISTRY/projecthami/hami; projecthami/hami (docker.io
    implied) -> the same; busybox -> REGISTRY/library/busybox (the host rule:
    appliance_cli/rules/images.py)."""
    if not image.partition("/")[2]:  # one part: docker.io's library/
        return f"{registry}/library/{image}"
    return in_registry(image, registry)


def _at(values: Mapping[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _minor(kube_version: str) -> int:
    try:
        return int(kube_version.lstrip("v").split(".")[1])
    except (IndexError, ValueError):
        raise SchedulerValuesError(f"kubernetes version '{kube_version}' is not vMAJOR.MINOR.PATCH") from None


# ---- HAMi -----------------------------------------------------------------------------------------
HAMI_IMAGE_KEYS = (
    "scheduler.kubeScheduler.image",
    "scheduler.extender.image",
    "scheduler.patch.image",
    "scheduler.patch.imageNew",
    "devicePlugin.image",
    "devicePlugin.monitorimage",
)


def hami_values(base: Mapping[str, Any], registry: str, node_selector: Mapping[str, str]) -> dict[str, Any]:
    """The HAMi release's values: every image key of `base` moved to the private registry, the
    device plugin on the nodes matching `node_selector` (the gpu-workers' label)."""
    values: dict[str, Any] = _plain(dict(base))
    for key in HAMI_IMAGE_KEYS:
        *parents, leaf = key.split(".")
        node: Any = values
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not node.get(leaf):
            raise SchedulerValuesError(
                f"hami values: {key} is not set (the chart's default pulls from the internet): set it"
            )
        node[leaf] = private_image(str(node[leaf]), registry)
    if not node_selector:
        raise SchedulerValuesError(
            "hami: the device plugin's node selector is empty (it would run on every node)"
        )
    values.setdefault("devicePlugin", {})["nvidianodeSelector"] = _plain(dict(node_selector))
    return values


def hami_images(
    values: Mapping[str, Any], chart_values: Mapping[str, Any] | None, kube_version: str
) -> list[str]:
    """Every image the HAMi release pulls on a cluster of `kube_version`, `values` over the chart's
    values.yaml, as its templates build them."""
    merged = coalesce(_plain(chart_values or {}), _plain(values))
    version = merged.get("version")
    if not version:
        raise SchedulerValuesError("hami values: version (the extender and device plugin tag) is not set")
    out = []
    if _at(merged, "scheduler.kubeScheduler.enabled") is not False:
        out.append(f"{_at(merged, 'scheduler.kubeScheduler.image')}:{kube_version}")
    out.append(f"{_at(merged, 'scheduler.extender.image')}:{version}")
    out.append(
        str(
            _at(merged, "scheduler.patch.imageNew" if _minor(kube_version) >= 22 else "scheduler.patch.image")
        )
    )
    out.append(f"{_at(merged, 'devicePlugin.image')}:{version}")
    return list(dict.fromkeys(out))


# ---- Volcano --------------------------------------------------------------------------------------
def volcano_values(base: Mapping[str, Any], registry: str) -> dict[str, Any]:
    """The Volcano release's values: each basic.<part>_image_name moved to the private registry."""
    values: dict[str, Any] = _plain(dict(base))
    basic = values.get("basic")
    if not isinstance(basic, dict) or not basic.get("image_tag_version"):
        raise SchedulerValuesError("volcano values: basic.image_tag_version is not set")
    for part in VOLCANO_PARTS:
        key = f"{part}_image_name"
        if not basic.get(key):
            raise SchedulerValuesError(f"volcano values: basic.{key} is not set")
        basic[key] = private_image(str(basic[key]), registry)
    basic.pop("image_registry", None)  # 1.10's key: 1.9 ignores it, and it would only mislead
    return values


def volcano_images(values: Mapping[str, Any], chart_values: Mapping[str, Any] | None = None) -> list[str]:
    """Every image the Volcano 1.9 release pulls (controllers, scheduler, admission)."""
    merged = coalesce(_plain(chart_values or {}), _plain(values))
    basic = merged.get("basic") or {}
    return list(
        dict.fromkeys(f"{basic[f'{p}_image_name']}:{basic['image_tag_version']}" for p in VOLCANO_PARTS)
    )


def outside_registry(images: list[str], registry: str) -> list[str]:
    """The images that would not come from the private registry."""
    return [i for i in images if not str(i).startswith(f"{registry}/")]


# ---- Queues ---------------------------------------------------------------------------------------
def _quantity(gpus: Any) -> int | str:
    """4 -> 4, 4.0 -> 4, 0.5 -> '0.5' (a resource quantity)."""
    g = float(gpus)
    return int(g) if g.is_integer() else str(g)


def queues(projects: list[Mapping[str, Any]], site_gpus: int) -> list[dict[str, Any]]:
    """One Queue per project: deserved = its GPUs (the capacity plugin's share; the proportion
    plugin shares by weight, = its GPUs rounded up, at least 1: Volcano refuses 0); capability =
    its GPUs, or the site's GPUs when it may go over quota; reclaimable = over_quota (what it
    borrows beyond deserved is taken back when its owners want it)."""
    out = []
    for p in _plain(projects):
        gpus = float(p.get("gpus") or 0)
        over = bool(p.get("over_quota", True))
        out.append(
            {
                "apiVersion": QUEUE_API,
                "kind": "Queue",
                "metadata": {
                    "name": p["name"],
                    "labels": {
                        **MANAGED_BY,
                        PROJECT_LABEL: p["name"],
                        DEPARTMENT_LABEL: str(p.get("department") or "default"),
                    },
                },
                "spec": {
                    "weight": max(1, math.ceil(gpus)),
                    "reclaimable": over,
                    "deserved": {GPU: _quantity(gpus)},
                    "capability": {GPU: _quantity(site_gpus if over else gpus)},
                },
            }
        )
    return out


def _same_quantity(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _spec_matches(live: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    for key, value in want.items():
        have = live.get(key)
        if isinstance(value, Mapping):
            if not isinstance(have, Mapping) or set(have) != set(value):
                return False
            if not all(_same_quantity(have[k], v) for k, v in value.items()):
                return False
        elif have != value:
            return False
    return True


def queue_plan(live_json: str, wanted: list[Mapping[str, Any]]) -> dict[str, Any]:
    """`live_json`: `kubectl get queues.scheduling.volcano.sh -o json`. Returns
    {apply: [names missing or different], stale: [appliance queues of projects no longer in the
    site]}; only what the role set is compared (Volcano's webhook may add defaults)."""
    items = json.loads(live_json or "{}").get("items") or []
    live = {i["metadata"]["name"]: i for i in items}
    apply = []
    for q in _plain(wanted):
        have = live.get(q["metadata"]["name"])
        labels = (have or {}).get("metadata", {}).get("labels") or {}
        if (
            have is None
            or any(labels.get(k) != v for k, v in q["metadata"]["labels"].items())
            or not _spec_matches(have.get("spec") or {}, q["spec"])
        ):
            apply.append(q["metadata"]["name"])
    names = {q["metadata"]["name"] for q in wanted}
    stale = sorted(
        n
        for n, i in live.items()
        if n not in names
        and n not in VOLCANO_QUEUES
        and all(((i.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in MANAGED_BY.items())
    )
    return {"apply": apply, "stale": stale}


def queue_users(
    stale: list[str], podgroups_json: str, live_json: str = "", delete: bool = True
) -> dict[str, list[str]]:
    """{queue: [namespace/podgroup, ...]} of the stale queues to keep: in use (a PodGroup names it
    in spec.queue, or its status counts running, pending or inqueue jobs), or all of them when
    `delete` is off."""
    if not delete:
        return {q: ["scheduler_stack_open_delete_stale_queues is false"] for q in stale}
    users: dict[str, list[str]] = {q: [] for q in stale}
    for pg in json.loads(podgroups_json or "{}").get("items") or []:
        q = (pg.get("spec") or {}).get("queue")
        if q in users:
            meta = pg.get("metadata") or {}
            users[q].append(f"{meta.get('namespace')}/{meta.get('name')}")
    for i in json.loads(live_json or "{}").get("items") or []:
        name = i["metadata"]["name"]
        status = i.get("status") or {}
        if (
            name in users
            and not users[name]
            and any(int(status.get(k) or 0) for k in ("running", "pending", "inqueue"))
        ):
            users[name].append(
                "status: " + ", ".join(f"{k} {status.get(k) or 0}" for k in ("running", "pending", "inqueue"))
            )
    return {q: u for q, u in users.items() if u}


def queue_warnings(users: Mapping[str, list[str]]) -> list[str]:
    return [
        f"queue {q}: its project is no longer in the site config, but it is kept ({', '.join(u[:5])}"
        f"{' …' if len(u) > 5 else ''}); a later run deletes it once no PodGroup uses it"
        for q, u in sorted(users.items())
    ]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "scheduler_open_hami_values": hami_values,
            "scheduler_open_hami_images": hami_images,
            "scheduler_open_volcano_values": volcano_values,
            "scheduler_open_volcano_images": volcano_images,
            "scheduler_open_outside_registry": outside_registry,
            "scheduler_open_queues": queues,
            "scheduler_open_queue_plan": queue_plan,
            "scheduler_open_queue_users": queue_users,
            "scheduler_open_queue_warnings": queue_warnings,
        }
