"""The helm stand-in against the stand-in API server, with the REAL GPU Operator v24.6.2 and HAMi
2.4.1 chart archives (shared/fixtures/charts, verified by their published digests): kubeVersion,
values merging and --set, CRDs installed once, release records as helm's secret driver writes
them, list/status/get values/history/rollback/uninstall; and its own small charts for the cases
the real ones do not have (a schema, a kubeVersion that excludes 1.23)."""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.paths import ROOT
from tests._support.standin_cluster import Cluster
from tests.standin.k8s_standin.helmchart import kube_version_ok, load_chart, parse_set

CHARTS = ROOT.parent / "shared" / "fixtures" / "charts"
GPU_OP = CHARTS / "gpu-operator-v24.6.2.tgz"
needs_charts = pytest.mark.skipif(
    not GPU_OP.is_file(), reason="../shared/fixtures/charts is absent (a clone on its own)"
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.srv.shutdown()


def helm(c: Cluster, capsys, *args: str) -> tuple[int, str, str]:
    from tests.standin.k8s_standin.entry import main

    rc = main(["/usr/local/bin/helm", f"--kubeconfig={c.kubeconfig}", *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def chart_archive_bytes(files: dict[str, bytes]) -> bytes:
    """A .tgz of `files` (path -> bytes): a chart of this test's own."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as t:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def _chart(tmp_path: Path, name: str, kube: str | None = None, schema: dict | None = None) -> Path:
    meta = f"apiVersion: v2\nname: {name}\nversion: 0.1.0\nappVersion: '1.0'\n" + (
        f"kubeVersion: '{kube}'\n" if kube else ""
    )
    files = {
        f"{name}/Chart.yaml": meta.encode(),
        f"{name}/values.yaml": b"replicas: 1\nimage: {repository: x}\n",
    }
    if schema:
        files[f"{name}/values.schema.json"] = json.dumps(schema).encode()
    path = tmp_path / f"{name}-0.1.0.tgz"
    path.write_bytes(chart_archive_bytes(files))
    return path


def test_kube_version_constraints_as_helm_reads_them() -> None:
    assert kube_version_ok(">= 1.16.0-0", "v1.23.17")
    assert kube_version_ok(">= 1.16.0", "v1.23.17")
    assert not kube_version_ok(">= 1.24.0-0", "v1.23.17")
    assert kube_version_ok(">=1.20.0 <1.25.0", "v1.23.17") and not kube_version_ok(
        ">=1.20.0, <1.23.0", "v1.23.17"
    )
    assert kube_version_ok("~1.23", "v1.23.17") and not kube_version_ok("~1.22", "v1.23.17")
    assert kube_version_ok("< 1.20 || >= 1.23", "v1.23.17")
    assert not kube_version_ok(">= 1.16.0", "v1.23.17-eks-1")  # a prerelease needs a -0 constraint
    assert kube_version_ok(">= 1.16.0-0", "v1.23.17-eks-1")


@pytest.mark.parametrize(
    "constraint, ok",
    [
        # a constraint with fewer than three parts is a range (Masterminds/semver v3.2.1 "dirty")
        ("<= 1.23", True), ("<= 1.22", False), ("> 1.22", True), ("> 1.23", False), ("< 1.24", True),
        ("~1", True), ("~1.23.20", False), ("1.23.x", True), ("1.23", True), ("1.22.*", False),
        ("^1.20", True), ("^0.9", False), ("!= 1.23", False), ("!= 1.23.16", True), ("!= 1", False),
        ("1.20 - 1.24", True), ("1.24 - 1.25", False), ("=> 1.23.17", True), ("~> 1.23.0", True),
        # what NewConstraint refuses, helm's IsCompatibleRange takes as incompatible: no error
        (">= one", False), ("", False), ("1.23 garbage", False),
    ],
)  # fmt: skip
def test_kube_version_ranges_as_masterminds_semver_reads_them(constraint: str, ok: bool) -> None:
    assert kube_version_ok(constraint, "v1.23.17") is ok


def test_prereleases_follow_semver_precedence() -> None:
    assert kube_version_ok(">= 1.23.17-rc.2", "v1.23.17-rc.10")  # numeric identifiers compare as numbers
    assert not kube_version_ok(">= 1.23.17-rc.10", "v1.23.17-rc.2")
    assert kube_version_ok(">= 1.23.17-alpha.1", "v1.23.17-beta")  # and below alphanumeric ones
    assert kube_version_ok("!= 1.23.17", "v1.23.17-eks-1")  # an exact != has no prerelease guard
    assert not kube_version_ok(">= 1.16", "not-a-version")


def test_set_parses_as_helm_strvals() -> None:
    assert parse_set("a.b=c,n=5,t=true,z=null,l[1]=x") == {
        "a": {"b": "c"},
        "n": 5,
        "t": True,
        "z": None,
        "l": [None, "x"],
    }
    assert parse_set("v=0123") == {"v": "0123"}  # a leading zero stays a string


@needs_charts
def test_gpu_operator_installs_its_crds_and_records_the_release(
    cluster: Cluster, capsys, tmp_path: Path
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("operator: {repository: 10.0.0.1:5000/nvidia}\nnfd: {enabled: true}\n")
    rc, out, err = helm(cluster, capsys, "upgrade", "--install", "gpu-operator", str(GPU_OP), "-n", "gpu-operator",
                        "--create-namespace", "-f", str(values), "--set", "driver.enabled=false")  # fmt: skip
    assert rc == 0, err
    assert out.startswith('Release "gpu-operator" does not exist. Installing it now.\nNAME: gpu-operator\n')
    assert "STATUS: deployed\nREVISION: 1\n" in out
    crds = {
        c["metadata"]["name"]
        for c in cluster.admin().get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
    }
    assert {"clusterpolicies.nvidia.com", "nvidiadrivers.nvidia.com"} <= crds  # the chart's crds/
    assert "nodefeaturerules.nfd.k8s-sigs.io" in crds  # and the enabled NFD subchart's
    secret = cluster.admin().get("/api/v1/namespaces/gpu-operator/secrets/sh.helm.release.v1.gpu-operator.v1")
    assert secret["type"] == "helm.sh/release.v1"
    assert secret["metadata"]["labels"] == {
        "name": "gpu-operator",
        "owner": "helm",
        "status": "deployed",
        "version": "1",
    }
    rel = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(secret["data"]["release"]))))
    assert rel["config"] == {"operator": {"repository": "10.0.0.1:5000/nvidia"}, "nfd": {"enabled": True},
                             "driver": {"enabled": False}}  # fmt: skip
    assert rel["chart"]["metadata"]["version"] == "v24.6.2"
    rc, out, _ = helm(cluster, capsys, "get", "values", "gpu-operator", "-n", "gpu-operator", "-o", "json")
    assert json.loads(out)["driver"] == {"enabled": False}
    rc, out, _ = helm(
        cluster, capsys, "get", "values", "gpu-operator", "-n", "gpu-operator", "--all", "-o", "json"
    )
    merged = json.loads(out)
    assert (
        merged["operator"]["repository"] == "10.0.0.1:5000/nvidia"
        and merged["operator"]["image"] == "gpu-operator"
    )


@needs_charts
def test_upgrade_rollback_history_list_and_uninstall(cluster: Cluster, capsys) -> None:
    hami = str(CHARTS / "hami-2.4.1.tgz")
    assert helm(cluster, capsys, "install", "hami", hami, "-n", "kube-system")[0] == 0
    rc, _, err = helm(cluster, capsys, "install", "hami", hami, "-n", "kube-system")
    assert rc == 1 and err == "Error: INSTALLATION FAILED: cannot re-use a name that is still in use\n"
    rc, out, _ = helm(
        cluster, capsys, "upgrade", "hami", hami, "-n", "kube-system", "--set", "version=v2.4.2"
    )
    assert rc == 0 and 'Release "hami" has been upgraded. Happy Helming!' in out and "REVISION: 2" in out
    assert (
        helm(cluster, capsys, "rollback", "hami", "1", "-n", "kube-system")[1]
        == "Rollback was a success! Happy Helming!\n"
    )
    rc, out, _ = helm(cluster, capsys, "history", "hami", "-n", "kube-system")
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [(r[0], r[2]) for r in rows] == [("1", "superseded"), ("2", "superseded"), ("3", "deployed")]
    assert out.splitlines()[-1].endswith("Rollback to 1")
    assert (
        json.loads(helm(cluster, capsys, "get", "values", "hami", "-n", "kube-system", "-o", "json")[1]) == {}
    )
    rc, out, _ = helm(cluster, capsys, "list", "-A")
    assert out.splitlines()[1].split()[:3] == ["hami", "kube-system", "3"] and "hami-2.4.1" in out
    assert (
        helm(cluster, capsys, "uninstall", "hami", "-n", "kube-system")[1] == 'release "hami" uninstalled\n'
    )
    assert helm(cluster, capsys, "list", "-A")[1].count("\n") == 1  # the header only
    rc, out, _ = helm(cluster, capsys, "upgrade", "--install", "hami", hami, "-n", "kube-system")
    assert rc == 0 and "REVISION: 1" in out  # reinstall after uninstall starts over


def test_a_chart_whose_kube_version_excludes_1_23_is_refused(
    cluster: Cluster, capsys, tmp_path: Path
) -> None:
    chart = _chart(tmp_path, "newer", kube=">= 1.25.0-0")
    rc, _, err = helm(cluster, capsys, "upgrade", "--install", "newer", str(chart), "-n", "default")
    assert rc == 1
    # upgrade --install of a new release: install's error unwrapped (helm v3.14.4 cmd/helm/upgrade.go)
    assert err == ("Error: chart requires kubeVersion: >= 1.25.0-0 which is incompatible with "
                   "Kubernetes v1.23.17\n")  # fmt: skip
    rc, _, err = helm(cluster, capsys, "install", "newer", str(chart), "-n", "default")
    assert rc == 1 and err.startswith("Error: INSTALLATION FAILED: chart requires kubeVersion: >= 1.25.0-0 ")
    assert cluster.admin().get("/api/v1/namespaces/default/secrets?labelSelector=owner%3Dhelm")["items"] == []


def test_values_schema_is_enforced(cluster: Cluster, capsys, tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 1}}}
    chart = _chart(tmp_path, "schemed", schema=schema)
    rc, _, err = helm(cluster, capsys, "install", "s", str(chart), "-n", "default", "--set", "replicas=0")
    assert rc == 1 and "values don't meet the specifications of the schema(s)" in err and "replicas" in err
    assert helm(cluster, capsys, "install", "s", str(chart), "-n", "default", "--set", "replicas=2")[0] == 0


def test_a_missing_namespace_without_create_namespace_is_helms_error(
    cluster: Cluster, capsys, tmp_path: Path
) -> None:
    rc, _, err = helm(cluster, capsys, "install", "x", str(_chart(tmp_path, "x")), "-n", "nowhere")
    assert (
        rc == 1
        and err == 'Error: INSTALLATION FAILED: create: failed to create: namespaces "nowhere" not found\n'
    )


def test_a_subchart_of_a_subchart_is_read_from_its_own_directory(tmp_path: Path) -> None:
    def meta(name: str) -> bytes:
        return f"apiVersion: v2\nname: {name}\nversion: 1.0.0\n".encode()

    path = tmp_path / "outer.tgz"
    path.write_bytes(chart_archive_bytes({
        "outer/Chart.yaml": meta("outer"),
        "outer/charts/mid/Chart.yaml": meta("mid"),
        "outer/charts/mid/charts/inner/Chart.yaml": meta("inner"),
        "outer/charts/mid/charts/inner/crds/c.yaml": b"kind: CustomResourceDefinition\n",
    }))  # fmt: skip
    outer = load_chart(str(path))
    assert list(outer.subcharts) == ["mid"]
    assert list(outer.subcharts["mid"].subcharts) == ["inner"]
    assert outer.subcharts["mid"].subcharts["inner"].crds == [
        ("crds/c.yaml", b"kind: CustomResourceDefinition\n")
    ]


def test_reuse_values_merges_the_command_line_over_the_last_release(
    cluster: Cluster, capsys, tmp_path: Path
) -> None:
    chart = str(_chart(tmp_path, "demo"))
    values = tmp_path / "v.yaml"
    values.write_text("replicas: 2\nimage: {repository: site}\n")
    assert helm(cluster, capsys, "install", "demo", chart, "-n", "default", "-f", str(values))[0] == 0

    def get() -> dict:
        return json.loads(helm(cluster, capsys, "get", "values", "demo", "-n", "default", "-o", "json")[1])

    assert helm(cluster, capsys, "upgrade", "demo", chart, "--reuse-values", "--set", "note=x")[0] == 0
    assert get() == {"replicas": 2, "image": {"repository": "site"}, "note": "x"}
    # without it, helm takes only what this command line gives (the operator's --set is gone)
    assert helm(cluster, capsys, "upgrade", "demo", chart, "--set", "replicas=3")[0] == 0
    assert get() == {"replicas": 3}


def test_list_shows_deployed_and_failed_releases_not_pending_ones(
    cluster: Cluster, capsys, tmp_path: Path
) -> None:
    """helm v3.14.4's default list (pkg/action/list.go: deployed and failed): a release left
    pending by a killed helm is not listed, one whose upgrade failed is."""
    from tests.standin.k8s_standin.helm import decode, encode

    chart = str(_chart(tmp_path, "x"))
    for name in ("ok", "broke", "stuck"):
        assert helm(cluster, capsys, "install", name, chart, "-n", "default")[0] == 0
    api = cluster.admin()
    for name, status in (("broke", "failed"), ("stuck", "pending-upgrade")):
        path = f"/api/v1/namespaces/default/secrets/sh.helm.release.v1.{name}.v1"
        secret = api.get(path)
        rel = decode(secret)
        rel["info"]["status"] = status
        secret["data"]["release"] = base64.b64encode(encode(rel).encode()).decode()
        secret["metadata"]["labels"]["status"] = status
        api.call("PUT", path, secret)
    rc, out, _ = helm(cluster, capsys, "list", "-n", "default", "-o", "json")
    assert rc == 0 and sorted((r["name"], r["status"]) for r in json.loads(out)) == [
        ("broke", "failed"),
        ("ok", "deployed"),
    ]
