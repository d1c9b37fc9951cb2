"""The runai stack's values and API plans, as pure functions (tested in plain pytest:
tests/unit/test_scheduler_stack_runai.py). Runs on the controller; never sees a password.

Values: every image block of a chart's values moved to the private registry (`registry` +
`image`/`repository` blocks as ingress-nginx and kube-prometheus-stack write them, or a
`repository` naming its host as Run:ai's charts do), digests cleared (the private registry holds
only the bundle's pinned images, by tag); the backend's and the cluster's values from the site
(domain, external IP, TLS secret, NFS, air-gapped, Run:ai system nodes and the master's taint).

Images: what a release will pull with those values over the chart's own (`helm show values`):
every image block under a section that is not `enabled: false`.

API plans: which departments and projects to create or update so that Run:ai's match the site
config (GPU quotas, over-quota), and nothing when they already do (a re-run changes nothing);
which projects the role made have left the site config, to delete, and the jobs that still run in
them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from appliance_cli.rules.helmvalues import coalesce
from appliance_cli.rules.images import in_registry

NODE_POOL = "default"
# over_quota: may borrow idle GPUs beyond the quota (limit -1: unlimited; weight medium = 2)
OVER_QUOTA_WEIGHT = 2


class RunaiValuesError(ValueError):
    """Values or site data the role cannot use; the message names the key."""


def _plain(data: Any) -> Any:
    """Plain dicts/lists (ansible-core 2.19 hands filters tagged objects)."""
    return json.loads(json.dumps(data))


def private_repository(repository: str, registry: str) -> str:
    """gcr.io/run-ai-prod/backend -> REGISTRY/run-ai-prod/backend (the host dropped as
    registry_seed drops it: appliance_cli/rules/images.py)."""
    return in_registry(repository, registry)


def _image_blocks(
    node: Any, path: str = "", enabled_only: bool = False
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key path, mapping) of each image block: {registry, image|repository, ...} or
    {repository, tag}; under `enabled: false` sections only when not enabled_only."""
    if not isinstance(node, dict):
        return
    if enabled_only and node.get("enabled") is False:
        return
    name = node.get("image") if isinstance(node.get("image"), str) else node.get("repository")
    if isinstance(name, str) and ("registry" in node or "tag" in node):
        yield path, node
        return
    for k, v in node.items():
        yield from _image_blocks(v, f"{path}.{k}" if path else k, enabled_only)


def _privatise(block: dict[str, Any], registry: str) -> None:
    if isinstance(block.get("registry"), str):
        block["registry"] = registry
    else:
        block["repository"] = private_repository(str(block["repository"]), registry)
    for digest in ("digest", "digestChroot", "sha"):
        if digest in block:
            block[digest] = ""


def private_values(values: Mapping[str, Any], registry: str) -> dict[str, Any]:
    """`values` with every image block moved to the private registry and its digest cleared."""
    out: dict[str, Any] = _plain(dict(values))
    for _, block in _image_blocks(out):
        _privatise(block, registry)
    return out


def _image_overrides(chart_defaults: Mapping[str, Any], registry: str) -> dict[str, Any]:
    """Only the chart's image blocks, moved: what the release's values must override so that no
    image comes from the vendor's registry."""
    moved = private_values(chart_defaults, registry)
    out: dict[str, Any] = {}
    for path, block in _image_blocks(moved):
        node = out
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = block
    return out


def release_images(values: Mapping[str, Any], chart_defaults: Mapping[str, Any] | None = None) -> list[str]:
    """The references a release pulls: each image block of the merged values not under a
    section with `enabled: false`; a block without a tag is an error naming its key."""
    merged = coalesce(_plain(dict(chart_defaults or {})), _plain(dict(values)))
    refs = []
    for path, block in _image_blocks(merged, enabled_only=True):
        tag = block.get("tag")
        if not tag:
            raise RunaiValuesError(f"{path}.tag is empty: give the image's tag in the appliance's values")
        if isinstance(block.get("registry"), str):
            name = f"{block['registry']}/{block.get('image') or block.get('repository')}"
        else:
            name = str(block["repository"])
        refs.append(f"{name}:{tag}")
    return sorted(set(refs))


# kubeadm 1.24's `upgrade apply` taints control planes that have the master taint with this one too.
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane"


def system_placement(system_label: str, master_taint: str) -> dict[str, Any]:
    """Run:ai's system workloads: on the runai-system nodes, and allowed on the master, which
    keeps its NoSchedule taint (K13), and the control-plane one kubeadm 1.24 adds beside it."""
    keys = dict.fromkeys((master_taint, CONTROL_PLANE_TAINT))
    return {
        "nodeSelector": {system_label: "true"},
        "tolerations": [{"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in keys],
    }


def runai_backend_values(
    chart_defaults: Mapping[str, Any],
    registry: str,
    domain: str,
    external_ip: str,
    nfs_server: str,
    nfs_path: str,
    tls_secret: str,
    admin_email: str,
    system_label: str = "node-role.kubernetes.io/runai-system",
    master_taint: str = "node-role.kubernetes.io/master",
) -> dict[str, Any]:
    """What `runai-adm generate-values --external-ips IP --domain D --tls-cert/--tls-key
    --nfs-server S --nfs-path P --airgapped` writes, from the site, with every image of the
    chart moved to the private registry."""
    for key, value in (("site.domain", domain), ("scheduler.external_ip", external_ip),
                       ("nfs.server", nfs_server), ("nfs.path", nfs_path)):  # fmt: skip
        if not value:
            raise RunaiValuesError(f"{key} is empty: the Run:ai backend needs it")
    values = _image_overrides(chart_defaults, registry)
    values["global"] = coalesce(
        values.get("global", {}),
        {
            "domain": domain,
            "airgapped": True,
            "image": {"registry": f"{registry}/run-ai-prod"},
            "ingress": {"tlsSecretName": tls_secret},
            **system_placement(system_label, master_taint),
        },
    )
    values["nginx-ingress"] = coalesce(
        values.get("nginx-ingress", {}), {"controller": {"service": {"externalIPs": [external_ip]}}}
    )
    values["nfs-client-provisioner"] = {"enabled": True, "nfs": {"server": nfs_server, "path": nfs_path}}
    values["tenantsManager"] = {"config": {"adminUsername": admin_email}}
    return values


def runai_cluster_values(
    chart_defaults: Mapping[str, Any],
    registry: str,
    domain: str,
    cluster_uid: str,
    client_secret: str,
    system_label: str = "node-role.kubernetes.io/runai-system",
    master_taint: str = "node-role.kubernetes.io/master",
) -> dict[str, Any]:
    """The runai-cluster chart's values: the control plane and the cluster the backend's API
    registered (its UID and client secret), images from the private registry."""
    if not cluster_uid or not client_secret:
        raise RunaiValuesError("the cluster's uid and client secret are empty: register the cluster first")
    values = _image_overrides(chart_defaults, registry)
    url = f"https://{domain}"
    values["controlPlane"] = {"url": url, "clientSecret": client_secret}
    values["cluster"] = {"uid": cluster_uid, "url": url}
    values["global"] = coalesce(values.get("global", {}), system_placement(system_label, master_taint))
    return values


def runai_client_secret(install_info: Mapping[str, Any]) -> str:
    """The cluster's client secret from the cluster-install-info answer: its `clientSecret`, else
    the `controlPlane.clientSecret=` of the helm command it gives (`installationStr`)."""
    if install_info.get("clientSecret"):
        return str(install_info["clientSecret"])
    m = re.search(r"controlPlane\.clientSecret=([^\s\\]+)", str(install_info.get("installationStr") or ""))
    return m.group(1) if m else ""


# ---- departments, projects and quotas ------------------------------------------------------


def _resources(deserved: float, over_quota: bool) -> list[dict[str, Any]]:
    gpus = int(deserved) if float(deserved).is_integer() else float(deserved)
    return [
        {
            "nodePool": {"name": NODE_POOL},
            "gpu": {
                "deserved": gpus,
                "limit": -1 if over_quota else gpus,
                "overQuotaWeight": OVER_QUOTA_WEIGHT if over_quota else 0,
            },
        }
    ]


def _gpu(resources: Any) -> dict[str, Any]:
    """The default node pool's gpu block of an API answer's resources ({} when none)."""
    for r in resources or []:
        if ((r or {}).get("nodePool") or {}).get("name") in (NODE_POOL, None):
            gpu = r.get("gpu") or {}
            return {k: gpu.get(k) for k in ("deserved", "limit", "overQuotaWeight")}
    return {}


def desired_departments(
    departments: list[Mapping[str, Any]], projects: list[Mapping[str, Any]]
) -> dict[str, float]:
    """Department name -> its GPU quota: the site's `gpus`, else the sum of its projects'
    (every department a project names exists, `default` included)."""
    sums: dict[str, float] = {}
    for p in projects:
        dep = str(p.get("department") or "default")
        sums[dep] = sums.get(dep, 0) + float(p.get("gpus") or 0)
    out = {name: total for name, total in sums.items()}
    for d in departments:
        name = str(d["name"])
        out[name] = float(d["gpus"]) if d.get("gpus") is not None else sums.get(name, 0.0)
    return out


def quota_problem(
    departments: list[Mapping[str, Any]], projects: list[Mapping[str, Any]], site_gpus: int
) -> str:
    """'' when the quotas fit: projects' sum and departments' sum within the gpu-worker nodes'
    GPUs, and each department's projects within the department; else one line saying why."""
    total = sum(float(p.get("gpus") or 0) for p in projects)
    if total > site_gpus:
        return (
            f"scheduler.projects: their GPU quotas add up to {total:g}, the gpu-worker nodes have {site_gpus}"
        )
    wanted = desired_departments(departments, projects)
    if sum(wanted.values()) > site_gpus:
        return f"scheduler.departments: their GPU quotas add up to {sum(wanted.values()):g}, the gpu-worker nodes have {site_gpus}"
    for name, quota in wanted.items():
        inside = sum(
            float(p.get("gpus") or 0) for p in projects if (p.get("department") or "default") == name
        )
        if inside > quota:
            return f"scheduler.departments: {name} has {quota:g} GPUs, its projects ask for {inside:g}"
    return ""


def department_plan(current: list[Mapping[str, Any]], departments: list[Mapping[str, Any]],
                    projects: list[Mapping[str, Any]], cluster_id: str) -> list[dict[str, Any]]:  # fmt: skip
    """The API calls that make this cluster's departments match the site, [] when they already
    do: {name, method, suffix (after the collection's path), body}."""
    have = {str(d["name"]): d for d in current if str(d.get("clusterId", cluster_id)) == cluster_id}
    ops = []
    for name, quota in sorted(desired_departments(departments, projects).items()):
        res = _resources(quota, True)
        if name not in have:
            ops.append(_create(name, {"name": name, "clusterId": cluster_id, "resources": res}))
        elif _gpu(have[name].get("resources")) != res[0]["gpu"]:
            ops.append(_update(name, _api_id(have[name]), res))
    return ops


# An org unit's id as Run:ai's API returns it (a number or a UUID): it goes into a URL path
_API_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,63}")


def _api_id(unit: Mapping[str, Any]) -> str:
    """The unit's id, refused unless it is one (never a path of its own in the calls' URLs)."""
    uid = str(unit.get("id"))
    if not _API_ID.fullmatch(uid):
        raise RunaiValuesError(
            f"Run:ai's API answered {unit.get('name')!r} with the id {uid[:70]!r}: not an id"
        )
    return uid


def _create(name: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "method": "POST", "suffix": "", "body": body}


def _update(name: str, uid: str, resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "method": "PUT", "suffix": f"/{uid}/resources", "body": resources}


def project_plan(current: list[Mapping[str, Any]], projects: list[Mapping[str, Any]],
                 departments_now: list[Mapping[str, Any]], cluster_id: str) -> list[dict[str, Any]]:  # fmt: skip
    """The API calls that make this cluster's projects match the site (quota, over-quota,
    department), [] when they already do (department_plan's shape). A project in another
    department than the site's is named, never moved silently."""
    dep_ids = {
        str(d["name"]): str(d["id"])
        for d in departments_now
        if str(d.get("clusterId", cluster_id)) == cluster_id
    }
    have = {str(p["name"]): p for p in current if str(p.get("clusterId", cluster_id)) == cluster_id}
    ops = []
    for p in sorted(projects, key=lambda p: str(p["name"])):
        name, dep = str(p["name"]), str(p.get("department") or "default")
        if dep not in dep_ids:
            raise RunaiValuesError(f"scheduler.projects: {name}: department {dep} is not in Run:ai yet")
        res = _resources(float(p.get("gpus") or 0), bool(p.get("over_quota", True)))
        if name not in have:
            ops.append(
                _create(
                    name, {"name": name, "clusterId": cluster_id, "parentId": dep_ids[dep], "resources": res}
                )
            )
            continue
        if str(have[name].get("parentId")) != dep_ids[dep]:
            raise RunaiValuesError(
                f"scheduler.projects: {name} is in another Run:ai department than {dep}: move it in Run:ai's UI"
            )
        if _gpu(have[name].get("resources")) != res[0]["gpu"]:
            ops.append(_update(name, _api_id(have[name]), res))
    return ops


def stale_projects(current: list[Mapping[str, Any]], projects: list[Mapping[str, Any]],
                   recorded: str, cluster_id: str) -> list[dict[str, str]]:  # fmt: skip
    """[{name, id}] of this cluster's Run:ai projects that the role made (`recorded`: the record's
    text, the JSON list of the site's projects as the last run left them; '' when there is none
    yet) and the site no longer has. A project made in Run:ai's UI was never recorded: it is
    never deleted."""
    try:
        names = json.loads(recorded) if recorded.strip() else []
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise RunaiValuesError(
            "the record of the projects made (scheduler_stack_runai_projects_record) is not a JSON list "
            "of names: remove it, and no project is deleted until the next run has written it again"
        )
    gone = set(names) - {str(p["name"]) for p in projects}
    return sorted(
        ({"name": str(p["name"]), "id": _api_id(p)} for p in current
         if str(p.get("clusterId", cluster_id)) == cluster_id and str(p["name"]) in gone),
        key=lambda p: p["name"],
    )  # fmt: skip


# A pod that holds or waits for its project's GPUs (not yet Succeeded or Failed)
_LIVE_PHASES = ("Pending", "Running", "Unknown")


def project_jobs(
    stale: list[Mapping[str, Any]], pods_json: str, namespace_prefix: str
) -> dict[str, list[str]]:
    """{project: ['pod (phase)', ...]} of the stale projects whose namespace (Run:ai's
    <prefix><project>) still has pods that are not finished: `kubectl get pods -A -o json`."""
    items = json.loads(pods_json or "{}").get("items") or []
    busy: dict[str, list[str]] = {}
    for p in stale:
        namespace = namespace_prefix + str(p["name"])
        live = sorted(
            f"{i['metadata']['name']} ({(i.get('status') or {}).get('phase') or 'Pending'})"
            for i in items
            if (i.get("metadata") or {}).get("namespace") == namespace
            and ((i.get("status") or {}).get("phase") or "Pending") in _LIVE_PHASES
        )
        if live:
            busy[str(p["name"])] = live
    return busy


def jobs_refusal(busy: Mapping[str, list[str]]) -> str:
    """One line naming each project gone from the site that still runs jobs, and those jobs."""
    return "; ".join(f"{name}: {', '.join(pods)}" for name, pods in sorted(busy.items()))


def refused(results: list[Mapping[str, Any]]) -> list[str]:
    """'<name>: HTTP <status> <the API's message>' for each call of a plan the API refused
    (the uri results of a loop over a plan); the message never holds a secret."""
    out = []
    for r in results or []:
        status = r.get("status")
        if status not in (200, 201, 202, 204):
            message = (r.get("json") or {}).get("message") if isinstance(r.get("json"), dict) else None
            out.append(
                f"{(r.get('item') or {}).get('name', '?')}: HTTP {status} {message or r.get('msg', '')}".strip()
            )
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "runai_private_values": private_values,
            "runai_release_images": release_images,
            "runai_backend_values": runai_backend_values,
            "runai_cluster_values": runai_cluster_values,
            "runai_client_secret": runai_client_secret,
            "runai_quota_problem": quota_problem,
            "runai_department_plan": department_plan,
            "runai_project_plan": project_plan,
            "runai_refused": refused,
            "runai_stale_projects": stale_projects,
            "runai_project_jobs": project_jobs,
            "runai_jobs_refusal": jobs_refusal,
        }
