"""`appliance upgrade plan`: what an upgrade to a new bundle would do, and whether it can.

Reads what is installed (the cluster's kubeadm ClusterConfiguration, each node's kubelet, the helm
releases) and what the new, verified bundle carries (kubeadm/kubelet/kubectl versions, charts and
their `kubeVersion`), then lays out the steps in the order `upgrade apply` runs them: an etcd
snapshot, `kubeadm upgrade apply` on the master one minor at a time, the workers one at a time
(drain, `kubeadm upgrade node`, kubelet and kubectl, uncordon, Ready), containerd upgraded in each
node's own window (the master's step, each worker while drained), then the charts with their saved values (Run:ai's backend with the guide's extra step).

Refused, one line each, before anything changes: a downgrade; skipping a minor the bundle has no
binaries for (Kubernetes upgrades one minor at a time); the docker runtime past 1.23 (no
dockershim from 1.24), whether the site config says docker or a node reports it
(`status.nodeInfo.containerRuntimeVersion` docker://...); KAI below 1.28; a chart whose kubeVersion excludes the target version.
Pure: the inputs are plain data, tested without a cluster or a bundle.
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass, field
from functools import cmp_to_key
from pathlib import Path
from typing import Any

import yaml
from debian.deb822 import Packages
from debian.debian_support import version_compare

from appliance_cli.core.siteconfig import KAI_MIN_KUBERNETES, SiteConfig
from appliance_cli.errors import ApplianceError
from appliance_cli.rules.helmcharts import kube_version_problem, split_chart

KUBE_TOOLS = ("kubeadm", "kubelet", "kubectl")
RUNTIME_PACKAGE = "containerd"
# What a node runs: its containerd package's version (empty: not installed), then its codename.
# argv: the script is constant, the package its argument
RUNTIME_PROBE = [
    "sh", "-c", 'dpkg-query -W -f=\'${Version}\' "$1" 2>/dev/null; echo; . /etc/os-release && echo "$VERSION_CODENAME"',
    "sh", RUNTIME_PACKAGE,
]  # fmt: skip
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


class UpgradeRefused(ApplianceError):
    """A plan that cannot be carried out; nothing was changed."""

    exit_code = 2


def parse_version(v: str) -> tuple[int, int, int]:
    m = _VERSION.match(v.strip())
    if not m:
        raise ValueError(f"not a Kubernetes version: {v!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def clean(v: str) -> str:
    """v1.23.17-standin -> v1.23.17 (the lab's stand-in builds carry a suffix)."""
    a, b, c = parse_version(v)
    return f"v{a}.{b}.{c}"


@dataclass(frozen=True)
class Chart:
    name: str
    version: str
    kube_version: str = ""  # Chart.yaml kubeVersion ('' = any)


@dataclass
class Installed:
    kubernetes: str  # ClusterConfiguration kubernetesVersion
    kubelets: dict[str, str]  # node -> kubelet version
    releases: dict[str, tuple[str, str, str]]  # release -> (namespace, chart name, chart version)
    runtimes: dict[str, tuple[str, str]] = field(default_factory=dict)  # node -> (codename, containerd)
    # node -> status.nodeInfo.containerRuntimeVersion as the kubelet reports it (docker://20.10.5)
    reported: dict[str, str] = field(default_factory=dict)


@dataclass
class Target:
    kubernetes: list[str]  # every Kubernetes version the bundle has kubeadm, kubelet and kubectl for
    charts: dict[str, Chart] = field(default_factory=dict)
    containerd: dict[str, str] = field(default_factory=dict)  # apt repo codename -> containerd version


@dataclass
class Plan:
    changes: list[tuple[str, str, str]]  # component, current, target
    steps: list[str]
    drained: list[str]  # workers drained, in order, one at a time
    passes: list[str] = field(default_factory=list)  # `upgrade apply` runs one pass per version
    unchanged: list[tuple[str, str]] = field(default_factory=list)  # component, version: shown only
    notes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.changes


def target_of(manifest: dict[str, Any], chart_meta: dict[str, dict[str, Any]]) -> Target:
    """From a bundle manifest (JSON as loaded) and each chart's Chart.yaml (by artifact name)."""
    by_tool: dict[str, set[str]] = {t: set() for t in KUBE_TOOLS}
    charts: dict[str, Chart] = {}
    for a in manifest.get("artifacts") or []:
        tool = Path(a.get("install_path") or "").name
        if a.get("kind") == "file" and tool in by_tool and a.get("version"):
            # `kubernetes`: the release a test tool of another version is bundled for (lab kubectl)
            by_tool[tool].add(clean(a.get("kubernetes") or a["version"]))
        elif a.get("kind") == "helm-chart":
            meta = chart_meta.get(a["name"]) or {}
            charts[a["name"]] = Chart(
                a["name"], str(a.get("version") or ""), str(meta.get("kubeVersion") or "")
            )
    complete = set.intersection(*by_tool.values()) if all(by_tool.values()) else set()
    return Target(sorted(complete, key=parse_version), charts)


def chart_metadata(bundle: Path, manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Chart.yaml of every chart artifact, read from the bundle's blobs (a verified bundle)."""
    out: dict[str, dict[str, Any]] = {}
    for a in manifest.get("artifacts") or []:
        if a.get("kind") != "helm-chart" or not a.get("files"):
            continue
        digest = a["files"][0]["digest"].split(":", 1)[1]
        blob = bundle / "blobs" / "sha256" / digest
        try:
            with tarfile.open(blob, "r:gz") as tar:
                member = next(
                    m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/Chart.yaml")
                )
                fh = tar.extractfile(member)
                out[a["name"]] = yaml.safe_load(fh.read()) if fh else {}
        except (OSError, tarfile.TarError, StopIteration, yaml.YAMLError):
            out[a["name"]] = {}  # chunked or unreadable: no kubeVersion to check
    return out


def containerd_of(bundle: Path, manifest: dict[str, Any]) -> dict[str, str]:
    """codename -> the containerd version of each apt repository of the bundle (its flat repo's
    Packages index; the highest when it holds several: apt's candidate on the node)."""
    out: dict[str, str] = {}
    for a in manifest.get("artifacts") or []:
        index = next((f for f in a.get("files") or [] if f.get("path") == "Packages"), None)
        if a.get("kind") != "apt-repo" or index is None or index.get("chunks"):
            continue
        try:
            text = (bundle / "blobs" / "sha256" / index["digest"].split(":", 1)[1]).read_text(
                errors="replace"
            )
        except OSError:
            continue  # a verified bundle has it; nothing to compare with otherwise
        versions = [
            str(p["Version"])
            for p in Packages.iter_paragraphs(text, use_apt_pkg=False)
            if p.get("Package") == RUNTIME_PACKAGE and p.get("Version")
        ]
        if versions:
            codename = str((a.get("apt") or {}).get("codename") or a.get("version") or "")
            out[codename] = max(versions, key=cmp_to_key(version_compare))
    return out


def runtimes_from(answers: dict[str, str]) -> dict[str, tuple[str, str]]:
    """node -> (codename, containerd version) from each node's answer to RUNTIME_PROBE."""
    out = {}
    for node, text in answers.items():
        lines = [*text.splitlines(), "", ""]
        out[node] = (lines[1].strip(), lines[0].strip())
    return out


def _runtime_rows(
    cfg: SiteConfig, installed: Installed, target: Target
) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(node, current, target) of containerd for each node, and notes: `upgrade apply` upgrades
    containerd only (docker stays as installed), never downgrades, and only to what the bundle has."""
    runtime = cfg.kubernetes.container_runtime
    if runtime != RUNTIME_PACKAGE:
        return [], [f"container runtime {runtime}: not upgraded by upgrade apply (only containerd is)"]
    if not target.containerd:
        return [], ["containerd: the bundle carries no containerd package: not upgraded"]
    only = set(target.containerd.values())
    rows, notes = [], []
    for n in cfg.nodes:
        codename, current = installed.runtimes.get(n.name, ("", ""))
        want = target.containerd.get(codename) or (next(iter(only)) if len(only) == 1 else "")
        if n.name not in installed.runtimes or not want:
            continue
        if current and version_compare(current, want) > 0:
            notes.append(f"containerd ({n.name}): {current} is newer than the bundle's {want}: kept")
            want = current
        rows.append((n.name, current or "(not installed)", want))
    return rows, notes


def _runtime_plan(
    cfg: SiteConfig, installed: Installed, target: Target, changes: list[tuple[str, str, str]]
) -> tuple[dict[str, str], list[tuple[str, str]], list[str]]:
    """The containerd rows of the nodes behind added to `changes`; returns node -> target of those,
    (component, version) of the others, and the notes."""
    runtime, notes = _runtime_rows(cfg, installed, target)
    behind = {n: to for n, cur, to in runtime if cur != to}
    changes += [(f"containerd ({n})", cur, to) for n, cur, to in runtime if n in behind]
    return behind, [(f"containerd ({n})", to) for n, _, to in runtime if n not in behind], notes


def _runtime_steps(
    cfg: SiteConfig, steps: list[str], drained: list[str], behind: dict[str, str]
) -> list[str]:
    """containerd in each node's own window (`steps` changed in place; returns the workers drained):
    within the node's Kubernetes step (after the drain of a worker), else a step of its own."""
    master, workers = cfg.master.name, [n.name for n in cfg.nodes if n.name != cfg.master.name]
    for node, to in behind.items():
        what = f"containerd {to} from the new bundle's apt repository (restarted)"
        first = next((i for i, st in enumerate(steps) if st.startswith(f"{node}: ")), None)
        if first is not None:
            head = f"{node}: drain, " if steps[first].startswith(f"{node}: drain, ") else f"{node}: "
            steps[first] = f"{head}{what}, {steps[first].removeprefix(head)}"
        elif node == master:
            at = sum(1 for st in steps if st.startswith("etcd snapshot"))
            steps.insert(at, f"{master}: {what}, wait Ready")
        else:
            steps.append(f"{node}: drain, {what}, uncordon, wait Ready")
    return [w for w in workers if w in drained or w in behind]


def _minor_path(current: str, target: str, available: list[str]) -> list[str]:
    """The versions `kubeadm upgrade apply` goes through: the newest bundled patch of each minor."""
    cur, tgt = parse_version(current), parse_version(target)
    path = []
    for minor in range(cur[1] + 1 if tgt[1] > cur[1] else cur[1], tgt[1] + 1):
        of_minor = [v for v in available if parse_version(v)[:2] == (cur[0], minor)]
        if not of_minor:
            raise UpgradeRefused(
                f"kubernetes: {current} -> {target} skips 1.{minor}: the bundle has no v1.{minor} "
                "kubeadm/kubelet/kubectl (Kubernetes upgrades one minor at a time)",
                hint=f"build the bundle with the v1.{minor} binaries as well",
            )
        path.append(max(of_minor, key=parse_version))
    return [v for v in path if parse_version(v) > cur]


def _refuse_docker(cfg: SiteConfig, installed: Installed, goal: str) -> None:
    """No dockershim from 1.24: the site config's docker, and, whatever the config says, a node
    whose kubelet reports docker."""
    if parse_version(goal)[:2] <= (1, 23):
        return
    if cfg.kubernetes.container_runtime == "docker":
        raise UpgradeRefused(
            f"kubernetes.container_runtime: docker past 1.23 (target {goal}): Kubernetes 1.24 removed dockershim",
            hint="move the site to containerd first (kubernetes.container_runtime: containerd, then install)",
        )
    docker = sorted(n for n, rt in installed.reported.items() if rt.startswith("docker://"))
    if docker:
        raise UpgradeRefused(
            f"node {docker[0]}: container runtime {installed.reported[docker[0]]} past 1.23 (target {goal}): "
            f"Kubernetes 1.24 removed dockershim ({len(docker)} node(s) on docker: {', '.join(docker)})",
            hint="move the site to containerd first (kubernetes.container_runtime: containerd, then install)",
        )


def plan_upgrade(cfg: SiteConfig, installed: Installed, target: Target) -> Plan:
    current = clean(installed.kubernetes)
    if not target.kubernetes:
        raise UpgradeRefused(
            "bundle: no Kubernetes version with all of kubeadm, kubelet and kubectl",
            hint="is this an appliance bundle? (`appliance bundle inspect`)",
        )
    goal = target.kubernetes[-1]
    if parse_version(goal) < parse_version(current):
        raise UpgradeRefused(
            f"kubernetes: the bundle's {goal} is older than the cluster's {current}: downgrades are not supported",
            hint="use the bundle the site was installed or last upgraded with",
        )
    path = _minor_path(current, goal, target.kubernetes)
    _refuse_docker(cfg, installed, goal)
    if cfg.scheduler.stack == "kai" and parse_version(goal)[:2] < KAI_MIN_KUBERNETES:
        raise UpgradeRefused(f"scheduler.stack: kai needs Kubernetes >= 1.28, the bundle goes to {goal}")
    problems = [
        p
        for chart in target.charts.values()
        if (
            p := kube_version_problem(
                {"name": chart.name, "version": chart.version, "kubeVersion": chart.kube_version}, goal
            )
        )
    ]
    if problems:
        raise UpgradeRefused(problems[0], hint="the bundle must carry chart versions that support the target")

    changes: list[tuple[str, str, str]] = []
    if path:
        changes.append(("kubernetes", current, goal))
    stale = {n: clean(v) for n, v in installed.kubelets.items() if clean(v) != goal}
    if stale and not path:
        changes.append(("kubelet", ", ".join(f"{n} {v}" for n, v in sorted(stale.items())), goal))
    behind, unchanged, notes = _runtime_plan(cfg, installed, target, changes)
    for release, (ns, name, version) in sorted(installed.releases.items()):
        chart = target.charts.get(name)
        if chart and chart.version != version:
            changes.append((f"chart {release} ({ns})", f"{name} {version}", f"{name} {chart.version}"))

    workers = [n.name for n in cfg.nodes if n.name != cfg.master.name]
    steps: list[str] = []
    drained: list[str] = []
    if path or stale:
        steps.append(
            f"etcd snapshot on {cfg.master.name} (kept there, 0600: a plain etcd snapshot for etcdutl snapshot restore)"
        )
        for v in path:
            steps.append(f"{cfg.master.name}: kubeadm upgrade apply {v}, then its kubelet and kubectl")
            for w in workers:
                steps.append(
                    f"{w}: drain, kubeadm upgrade node, kubelet and kubectl {v}, restart, uncordon, wait Ready"
                )
            drained = workers
        if not path:
            for w in sorted(stale):
                steps.append(f"{w}: drain, kubelet and kubectl {goal}, restart, uncordon, wait Ready")
            drained = [w for w in workers if w in stale]
    drained = _runtime_steps(cfg, steps, drained, behind)
    for component, _, to in changes:
        if component.startswith("chart "):
            release = component.split()[1]
            extra = (
                " (the guide's step first: delete deployment runai-backend-nginx-ingress-controller)"
                if release == "runai-backend"
                else ""
            )
            steps.append(
                f"{cfg.master.name}: helm get values {release} (saved there, 0600), "
                f"helm upgrade {release} to {to} -f those values{extra}"
            )
    # charts alone still take one pass at the cluster's version: the playbook ends with them
    passes = path or ([goal] if stale or changes else [])
    return Plan(changes, steps, drained, passes, unchanged, notes)


def render(plan: Plan, cfg: SiteConfig) -> list[str]:
    width = max([len(c) for c, _, _ in plan.changes] + [len(c) for c, _ in plan.unchanged] + [0])
    same = [f"  {c:<{width}}  {v} (unchanged)" for c, v in plan.unchanged]
    if plan.empty:
        return [
            f"{cfg.site.name}: nothing to upgrade: every component is at the bundle's version",
            *same,
            *plan.notes,
        ]
    lines = [f"{cfg.site.name}: upgrade plan"]
    lines += [f"  {c:<{width}}  {cur} -> {to}" for c, cur, to in plan.changes]
    lines += same + plan.notes
    lines.append("steps, in order:")
    lines += [f"  {i}. {s}" for i, s in enumerate(plan.steps, 1)]
    if plan.drained:
        lines.append(
            f"drained one at a time (never two workers unschedulable at once): {', '.join(plan.drained)}"
        )
    return lines


def installed_from(kubectl_json: Any, helm_json: Any) -> Installed:
    """kubectl_json(argv) -> parsed JSON of `kubectl ARGV... -o json`; helm_json(argv) the same for helm."""
    cm = kubectl_json(["-n", "kube-system", "get", "configmap", "kubeadm-config"])
    cluster = yaml.safe_load((cm.get("data") or {}).get("ClusterConfiguration") or "") or {}
    nodes = kubectl_json(["get", "nodes"])
    kubelets = {
        n["metadata"]["name"]: n["status"]["nodeInfo"]["kubeletVersion"] for n in nodes.get("items") or []
    }
    reported = {
        n["metadata"]["name"]: str(n["status"]["nodeInfo"].get("containerRuntimeVersion") or "")
        for n in nodes.get("items") or []
    }
    releases = {}
    for r in helm_json(["list", "-A"]) or []:
        name, version = split_chart(r.get("chart", ""))
        status = r.get("status") or "deployed"  # a failed upgrade is upgraded again
        releases[r["name"]] = (
            r.get("namespace", ""),
            name,
            version if status == "deployed" else f"{version} ({status})",
        )
    version = str(cluster.get("kubernetesVersion") or "")
    if not version:
        raise ApplianceError(
            "kube-system/kubeadm-config has no kubernetesVersion: is this cluster made by kubeadm?",
            hint="`appliance status` shows what the cluster reports",
        )
    return Installed(version, kubelets, releases, reported=reported)
