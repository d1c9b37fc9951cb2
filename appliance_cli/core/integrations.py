"""`appliance integrations render`: per project of the site, the files researchers hand to Kubeflow
and MLflow (Run:ai appliance guide, "Integration"): Kubeflow PodDefaults (whole GPU, a GPU
fraction) and MLflow Kubernetes job templates (batch, interactive; whole GPU, fraction) with the
scheduler's name and the project's namespace, and MLflow's kubernetes_config.json pointing at the
researcher registry. Pure: reads the site config, writes files, contacts no cluster.

What a PodDefault can carry is what Kubeflow's CRD has (kubeflow.org/v1alpha1: selector, desc,
env, envFrom, volumes, volumeMounts, annotations, labels, tolerations, serviceAccountName): no
schedulerName and no container resources. So the PodDefaults carry the project (env, labels), the
queue and Run:ai's fraction (annotations); the scheduler name and GPU resources are in the job
templates, which are whole pod specs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from appliance_cli.content import templates_dir
from appliance_cli.core.siteconfig import SiteConfig, project_namespace
from appliance_cli.errors import UsageError
from appliance_cli.fsutil import atomic_write

GPU = "nvidia.com/gpu"
# The fraction the fractional variants ask for (the guide's runai-half-gpu).
FRACTION = 0.5
# kubeadm's admin context (clusterName `kubernetes`): MLflow's kube-context.
KUBE_CONTEXT = "kubernetes-admin@kubernetes"
# Job name, container name and image are set by MLflow when it submits the job: these are the
# placeholders of MLflow's kubernetes_job_template.yaml, as the Run:ai guide writes them.
PROJECT_NAME = "{replaced with MLflow project name}"
IMAGE = "{replaced with URI of Docker image created during docker build}"
COMMAND = "{replaced with MLflow Project entry point command}"


@dataclass(frozen=True)
class Stack:
    scheduler: str  # the pods' schedulerName


STACKS = {
    # Run:ai: its scheduler runai-scheduler; HAMi + Volcano: Volcano schedules (queue = the
    # project, scheduling.volcano.sh/queue-name). Namespaces: siteconfig.project_namespace.
    "runai": Stack("runai-scheduler"),
    "open": Stack("volcano"),
}


@dataclass(frozen=True)
class ProjectFiles:
    project: str
    namespace: str
    scheduler: str
    directory: Path
    files: tuple[str, ...]


def _num(x: float) -> str:
    """0.5 -> "0.5", 1.0 -> "1" (annotation and env values are strings)."""
    return f"{x:g}"


def poddefaults(stack: str, project: str) -> list[dict[str, Any]]:
    """The project's Kubeflow PodDefaults: whole GPUs, and a fraction of one."""
    ns = project_namespace(stack, project)

    def pd(
        name: str, desc: str, env: list[dict[str, str]], annotations: dict[str, str], labels: dict[str, str]
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {"desc": desc, "selector": {"matchLabels": {name: "true"}}}
        if env:
            spec["env"] = env
        if annotations:
            spec["annotations"] = annotations
        spec["labels"] = labels
        return {
            "apiVersion": "kubeflow.org/v1alpha1",
            "kind": "PodDefault",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }

    frac = _num(FRACTION)
    if stack == "runai":
        env = [{"name": "RUNAI_PROJECT", "value": project}]
        labels = {"project": project}
        return [
            pd(
                "runai-non-fractional",
                f"Use Run:ai scheduler (whole GPUs), project {project}",
                env,
                {},
                labels,
            ),
            pd(
                f"runai-gpu-fraction-{frac.replace('.', '-')}",
                f"Allocate {frac} GPUs via Run:ai scheduler, project {project} (GPU: None in the form)",
                [*env, {"name": "RUNAI_GPU_FRACTION", "value": frac}],
                {"gpu-fraction": frac},
                labels,
            ),
        ]
    queue = {"scheduling.volcano.sh/queue-name": project}
    labels = {"appliance.io/project": project}
    return [
        pd("volcano-queue", f"Volcano queue {project} (GPUs from the form)", [], queue, labels),
    ]


def job_template(stack: str, project: str, *, interactive: bool, fraction: bool) -> dict[str, Any]:
    """MLflow's kubernetes_job_template.yaml for the project: namespace, scheduler, GPU request."""
    s = STACKS[stack]
    limits: dict[str, Any] = {}
    pod_annotations: dict[str, str] = {}
    labels: dict[str, str] = {}
    if stack == "runai":
        labels["project"] = project
        if fraction:
            pod_annotations["gpu-fraction"] = _num(FRACTION)
        else:
            limits[GPU] = 1
        if interactive:
            labels["priorityClassName"] = "build"  # Run:ai's interactive (non-preemptible) workloads
    else:
        pod_annotations["scheduling.volcano.sh/queue-name"] = project
        labels["appliance.io/project"] = project
        limits[GPU] = 1
        if fraction:  # HAMi: a share of one GPU's memory and compute (any GPU model)
            limits["nvidia.com/gpumem-percentage"] = int(FRACTION * 100)
            limits["nvidia.com/gpucores"] = int(FRACTION * 100)
        if interactive:
            pod_annotations["volcano.sh/preemptable"] = "false"  # not evicted to reclaim the queue
    pod_meta: dict[str, Any] = {"labels": dict(labels)}
    if pod_annotations:
        pod_meta["annotations"] = pod_annotations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": PROJECT_NAME,
            "namespace": project_namespace(stack, project),
            "labels": dict(labels),
        },
        "spec": {
            "ttlSecondsAfterFinished": 100,
            "backoffLimit": 0,
            "template": {
                "metadata": pod_meta,
                "spec": {
                    "schedulerName": s.scheduler,
                    "containers": [
                        {
                            "name": PROJECT_NAME,
                            "image": IMAGE,
                            "command": [COMMAND],
                            **({"resources": {"limits": limits}} if limits else {}),
                        }
                    ],
                    "restartPolicy": "Never",
                },
            },
        },
    }


def repository_uri(cfg: SiteConfig, project: str) -> str:
    """Where MLflow pushes the project's image: the researcher registry when the site has one."""
    if cfg.researcher_registry:
        return f"{cfg.researcher_registry.address}/{project}/mlflow-project"
    return f"REGISTRY-YOU-CAN-PUSH-TO/{project}/mlflow-project"


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(templates_dir() / "integrations")),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # block style, keys in the order built, long strings never folded: the same site, the same bytes
    env.filters["to_yaml"] = lambda v: yaml.safe_dump(
        v, sort_keys=False, default_flow_style=False, width=1000
    )
    return env


JOB_VARIANTS = (
    ("mlflow/kubernetes_job_template.yaml", False, False),
    ("mlflow/kubernetes_job_template-interactive.yaml", True, False),
    ("mlflow/kubernetes_job_template-fraction.yaml", False, True),
    ("mlflow/kubernetes_job_template-fraction-interactive.yaml", True, True),
)


def render(cfg: SiteConfig, out_dir: Path) -> list[ProjectFiles]:
    """Writes out_dir/<project>/… for every project; returns what it wrote, in the site's order.
    Files are rewritten only when their text changed (same site, same bytes)."""
    stack = cfg.scheduler.stack
    if stack not in STACKS:
        raise UsageError(
            f"scheduler.stack is {stack}: no scheduler to render Kubeflow and MLflow files for",
            hint="set scheduler.stack to runai or open (and its projects) in appliance.yml",
        )
    if not cfg.scheduler.projects:
        raise UsageError(
            "scheduler.projects is empty: no project to render Kubeflow and MLflow files for",
            hint="add projects under scheduler.projects in appliance.yml ({name, gpus})",
        )
    env = _env()
    s = STACKS[stack]
    out: list[ProjectFiles] = []
    for p in cfg.scheduler.projects:
        d = out_dir / p.name
        files: dict[str, str] = {}
        for doc in poddefaults(stack, p.name):
            name = doc["metadata"]["name"]
            files[f"kubeflow/poddefault-{name}.yaml"] = env.get_template("poddefault.yaml.j2").render(
                doc=doc, stack=stack
            )
        for path, interactive, fraction in JOB_VARIANTS:
            job = job_template(stack, p.name, interactive=interactive, fraction=fraction)
            files[path] = env.get_template("kubernetes_job_template.yaml.j2").render(
                job=job, stack=stack, interactive=interactive, fraction=fraction
            )
        files["mlflow/kubernetes_config.json"] = env.get_template("kubernetes_config.json.j2").render(
            context=KUBE_CONTEXT,
            repository_uri=repository_uri(cfg, p.name),
            template_path="kubernetes_job_template.yaml",
        )
        for rel, text in files.items():
            target = d / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists() or target.read_text() != text:
                atomic_write(target, text)
        out.append(
            ProjectFiles(p.name, project_namespace(stack, p.name), s.scheduler, d, tuple(sorted(files)))
        )
    return out
