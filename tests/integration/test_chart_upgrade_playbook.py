"""The chart_upgrade role run by Ansible against localhost, with the Run:ai backend path the lab's
open stack never takes: helm the test stand-in (tests/standin/k8s_standin) and kubectl Debian's
real client on PATH, talking to the stand-in API server; the new chart is served over loopback HTTP as the master's
bundle server serves it. Shown: the guide's step (the backend's ingress controller deployment
deleted) before `helm upgrade`; the values the release had, the operator's `--reuse-values --set`
among them, carried over (saved 0600); the release at the new chart version; the state file
records it in its own key (kube_upgrade's left as it was); --check writes nothing; a re-run
changes nothing."""

from __future__ import annotations

import hashlib
import json
import subprocess

import yaml

from tests._support.standin_localhost import env, localhost_changed, run_play, sh  # noqa: F401  (env: the fixture)
from tests.unit.test_standin_helm import chart_archive_bytes

NS, INGRESS = "runai-backend", "runai-backend-nginx-ingress-controller"


def _chart(version: str) -> bytes:
    return chart_archive_bytes({
        "runai-backend/Chart.yaml": f"apiVersion: v2\nname: runai-backend\nversion: {version}\n".encode(),
        "runai-backend/values.yaml": b"global: {domain: example}\ntenant: {}\n",
    })  # fmt: skip


def _run(env: dict, new: bytes, *flags: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    tmp = env["tmp"]
    (env["www"] / "runai-backend-2.13.5.tgz").write_bytes(new)
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local",
             "roles": [{"role": "chart_upgrade"}]}]  # fmt: skip
    extra = {
        "appliance_bundle_charts": {"runai-backend": {
            "version": "2.13.5", "url": f"{env['url']}/runai-backend-2.13.5.tgz",
            "sha256": hashlib.sha256(new).hexdigest()}},
        "appliance_kubernetes_version": "v1.23.17",
        "chart_upgrade_kubeconfig": str(env["cluster"].kubeconfig),
        "chart_upgrade_state_file": str(tmp / "upgrade" / "state.json"),
        "chart_upgrade_values_dir": str(tmp / "upgrade" / "values"),
        "helm_chart_dir": str(tmp / "charts"),
        "helm_values_dir": str(tmp / "helm-values"),
    }  # fmt: skip
    return run_play(env, play, extra, *flags)


def test_the_runai_backend_is_upgraded_the_guides_way_keeping_the_operators_values(env) -> None:  # noqa: F811
    old = env["tmp"] / "runai-backend-2.13.0.tgz"
    old.write_bytes(_chart("2.13.0"))
    site = env["tmp"] / "site-values.yaml"
    site.write_text("global: {domain: runai.lab.internal}\n")
    assert sh(env, "helm", "install", "runai-backend", str(old), "-n", NS, "--create-namespace",
               "-f", str(site)).returncode == 0  # fmt: skip
    # the operator's change after the install, which the upgrade must keep
    tweak = sh(env, "helm", "upgrade", "runai-backend", str(old), "-n", NS, "--reuse-values",
                "--set", "tenant.note=kept")  # fmt: skip
    assert tweak.returncode == 0, tweak.stderr
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": INGRESS, "namespace": NS},
                  "spec": {"selector": {"matchLabels": {"app": "x"}},
                           "template": {"metadata": {"labels": {"app": "x"}},
                                        "spec": {"containers": [{"name": "c", "image": "x"}]}}}}  # fmt: skip
    env["cluster"].admin().call("POST", f"/apis/apps/v1/namespaces/{NS}/deployments", deployment)
    assert sh(env, "kubectl", "-n", NS, "get", "deployment", INGRESS).returncode == 0

    (env["tmp"] / "charts").mkdir()  # the install made it (helm's chart.yml: a dry run needs it there)
    dry = _run(env, _chart("2.13.5"), "--check")  # changes nothing on the cluster
    assert dry.returncode == 0, dry.stdout[-4000:]
    assert not (env["tmp"] / "upgrade").exists()  # no state, no values dir: check mode writes nothing
    # kube_upgrade's key, written before the charts move: chart_upgrade changes only its own
    kube = {"target": "v1.23.17", "done": ["localhost"], "draining": "", "snapshot": "/s.db"}
    (env["tmp"] / "upgrade").mkdir(mode=0o700)
    (env["tmp"] / "upgrade" / "state.json").write_text(json.dumps({"schema": 1, "kube_upgrade": kube}))
    assert sh(env, "kubectl", "-n", NS, "get", "deployment", INGRESS).returncode == 0
    assert "runai-backend-2.13.0" in sh(env, "helm", "list", "-A").stdout

    first = _run(env, _chart("2.13.5"))
    assert first.returncode == 0, first.stdout[-4000:]
    out = first.stdout
    # the guide's order: the ingress controller deleted, the values saved, then helm upgrade
    order = [out.index(t) for t in ("Delete the Run:ai backend's ingress controller",
                                    "Save the release's values", "helm upgrade with the saved values")]  # fmt: skip
    assert order == sorted(order)
    assert sh(env, "kubectl", "-n", NS, "get", "deployment", INGRESS).returncode != 0
    releases = json.loads(sh(env, "helm", "list", "-A", "-o", "json").stdout)
    assert [(r["name"], r["chart"], r["status"]) for r in releases] == [
        ("runai-backend", "runai-backend-2.13.5", "deployed")
    ]
    values = json.loads(sh(env, "helm", "get", "values", "runai-backend", "-n", NS, "-o", "json").stdout)
    assert values == {"global": {"domain": "runai.lab.internal"}, "tenant": {"note": "kept"}}
    saved = env["tmp"] / "upgrade" / "values" / f"{NS}_runai-backend.yaml"
    assert oct(saved.stat().st_mode & 0o777) == "0o600" and yaml.safe_load(saved.read_text()) == values
    assert "runai.lab.internal" not in out  # the values are never shown
    state = json.loads((env["tmp"] / "upgrade" / "state.json").read_text())
    assert state == {
        "schema": 1,
        "kube_upgrade": kube,
        "chart_upgrade": {
            "target": "v1.23.17",
            "charts": {f"{NS}/runai-backend": "runai-backend 2.13.0 -> 2.13.5"},
            "charts_upgrading": "",
        },
    }

    again = _run(env, _chart("2.13.5"))
    assert again.returncode == 0 and localhost_changed(again.stdout) == 0, again.stdout[-3000:]
    history = json.loads(sh(env, "helm", "history", "runai-backend", "-n", NS, "-o", "json").stdout)
    assert len(history) == 3  # install, the operator's change, the upgrade: no revision from the re-run
