"""`appliance integrations render`: per project, Kubeflow PodDefaults and MLflow job templates
that parse, with the stack's scheduler name, the project's namespace and its GPU request or
annotation; the researcher registry as MLflow's repository; refusals; the same bytes twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from appliance_cli.cli.main import main
from appliance_cli.core import integrations
from appliance_cli.core.siteconfig import load_site

REPO = Path(__file__).resolve().parents[2]
LAB_SITE = REPO / "inventories" / "lab" / "appliance.yml"


def _site(tmp_path: Path, stack: str, projects=None, researcher: bool = True) -> Path:
    """The lab's site (lab addresses, nothing contacted) with this stack and projects."""
    doc = yaml.safe_load(LAB_SITE.read_text())
    doc["scheduler"]["stack"] = stack
    if stack == "runai":
        doc["scheduler"]["external_ip"] = "10.77.0.200"
    if projects is not None:
        doc["scheduler"]["projects"] = projects
    if researcher:
        doc["researcher_registry"] = {
            "address": "master1:5001",
            "users": [{"name": "alice", "password_file": "a"}],
        }
    d = tmp_path / "site"
    d.mkdir(exist_ok=True)
    (d / "appliance.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return d


def _docs(d: Path) -> dict[str, dict]:
    return {str(p.relative_to(d)): yaml.safe_load(p.read_text()) for p in sorted(d.rglob("*.yaml"))}


def _pod(job: dict) -> dict:
    return job["spec"]["template"]


def test_runai_poddefaults_and_job_templates(tmp_path):
    cfg = load_site(_site(tmp_path, "runai"))
    out = integrations.render(cfg, tmp_path / "out")
    assert [p.project for p in out] == [p.name for p in cfg.scheduler.projects]
    a = out[0]
    assert (a.namespace, a.scheduler) == (f"runai-{a.project}", "runai-scheduler")
    docs = _docs(a.directory)
    whole = docs["kubeflow/poddefault-runai-non-fractional.yaml"]
    assert (whole["apiVersion"], whole["kind"]) == ("kubeflow.org/v1alpha1", "PodDefault")
    assert whole["metadata"]["namespace"] == a.namespace
    assert {"name": "RUNAI_PROJECT", "value": a.project} in whole["spec"]["env"]
    assert whole["spec"]["selector"]["matchLabels"] == {"runai-non-fractional": "true"}
    # only fields Kubeflow's PodDefault CRD has (unknown ones would be pruned silently)
    allowed = {"selector", "desc", "env", "envFrom", "volumes", "volumeMounts", "annotations", "labels",
               "tolerations", "serviceAccountName", "automountServiceAccountToken"}  # fmt: skip
    frac = docs["kubeflow/poddefault-runai-gpu-fraction-0-5.yaml"]
    assert frac["spec"]["annotations"] == {"gpu-fraction": "0.5"}
    assert {"name": "RUNAI_GPU_FRACTION", "value": "0.5"} in frac["spec"]["env"]
    for pd in (whole, frac):
        assert set(pd["spec"]) <= allowed
    batch = docs["mlflow/kubernetes_job_template.yaml"]
    assert (batch["apiVersion"], batch["kind"], batch["metadata"]["namespace"]) == (
        "batch/v1",
        "Job",
        a.namespace,
    )
    assert _pod(batch)["spec"]["schedulerName"] == "runai-scheduler"
    c = _pod(batch)["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert c["image"] == "{replaced with URI of Docker image created during docker build}"
    assert batch["metadata"]["name"] == c["name"] == "{replaced with MLflow project name}"
    assert "priorityClassName" not in batch["metadata"]["labels"]
    inter = docs["mlflow/kubernetes_job_template-interactive.yaml"]
    assert inter["metadata"]["labels"]["priorityClassName"] == "build"
    fjob = docs["mlflow/kubernetes_job_template-fraction.yaml"]
    assert _pod(fjob)["metadata"]["annotations"] == {"gpu-fraction": "0.5"}
    assert "resources" not in _pod(fjob)["spec"]["containers"][0]
    conf = json.loads((a.directory / "mlflow" / "kubernetes_config.json").read_text())
    assert conf["repository-uri"] == f"master1:5001/{a.project}/mlflow-project"
    assert conf["kube-job-template-path"] == "kubernetes_job_template.yaml"


def test_open_stack_uses_volcano_queues_and_hami_shares(tmp_path):
    cfg = load_site(_site(tmp_path, "open", researcher=False))
    [a, *_] = integrations.render(cfg, tmp_path / "out")
    assert (a.namespace, a.scheduler) == (f"project-{a.project}", "volcano")
    docs = _docs(a.directory)
    queue = {"scheduling.volcano.sh/queue-name": a.project}
    pd = docs["kubeflow/poddefault-volcano-queue.yaml"]
    assert pd["metadata"]["namespace"] == a.namespace and pd["spec"]["annotations"] == queue
    for name, job in docs.items():
        if not name.startswith("mlflow/"):
            continue
        pod = _pod(job)
        assert job["metadata"]["namespace"] == a.namespace, name
        assert pod["spec"]["schedulerName"] == "volcano", name
        assert pod["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == a.project, name
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == 1, name
        if "fraction" in name:
            assert limits["nvidia.com/gpumem-percentage"] == 50 and limits["nvidia.com/gpucores"] == 50
        else:
            assert "nvidia.com/gpucores" not in limits
        if "interactive" in name:
            assert pod["metadata"]["annotations"]["volcano.sh/preemptable"] == "false"
    conf = json.loads((a.directory / "mlflow" / "kubernetes_config.json").read_text())
    assert conf["repository-uri"].startswith("REGISTRY-YOU-CAN-PUSH-TO/")  # no researcher registry


def test_the_same_site_gives_the_same_bytes(tmp_path):
    cfg = load_site(_site(tmp_path, "runai"))
    integrations.render(cfg, tmp_path / "one")
    integrations.render(cfg, tmp_path / "two")
    one = {
        p.relative_to(tmp_path / "one"): p.read_bytes() for p in (tmp_path / "one").rglob("*") if p.is_file()
    }
    two = {
        p.relative_to(tmp_path / "two"): p.read_bytes() for p in (tmp_path / "two").rglob("*") if p.is_file()
    }
    assert one == two and len(one) == 7 * len(cfg.scheduler.projects)


@pytest.mark.parametrize(
    ("stack", "projects", "message"),
    [
        ("none", [], "scheduler.stack is none"),
        ("open", [], "scheduler.projects is empty"),
    ],
)
def test_refuses_without_a_stack_or_projects(tmp_path, capsys, stack, projects, message):
    site = _site(tmp_path, stack, projects)
    rc = main(["integrations", "render", "--site", str(site), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "hint:" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_cli_prints_an_index(tmp_path, capsys):
    site = _site(tmp_path, "open")
    assert main(["integrations", "render", "--site", str(site)]) == 0
    out = capsys.readouterr().out
    cfg = load_site(site)
    for p in cfg.scheduler.projects:
        assert f"{p.name}: namespace project-{p.name}, scheduler volcano" in out
        assert str(site / "integrations" / p.name / "mlflow" / "kubernetes_job_template.yaml") in out
