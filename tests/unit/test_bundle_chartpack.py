"""A test chart directory packed as `helm package` would: the chart under <name>/, the same bytes
for the same files, readable by the helm stand-in."""

from __future__ import annotations

import io
import os
import sys
import tarfile
from pathlib import Path

import pytest

from appliance_cli.bundle import chartpack
from appliance_cli.errors import BundleError
from tests._support.paths import ROOT


def _chart(d: Path) -> Path:
    (d / "templates").mkdir(parents=True)
    (d / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 1.2.3\nkubeVersion: '>=1.20.0-0'\n")
    (d / "values.yaml").write_text("# defaults\nimage:\n  repository: registry.k8s.io/demo\n  tag: v1\n")
    (d / "templates" / "deployment.yaml").write_text("kind: Deployment\n")
    return d


def test_packed_chart_is_deterministic_and_named_as_helm_names_it(tmp_path: Path) -> None:
    src = _chart(tmp_path / "anydir")
    a = chartpack.pack(src, "charts/demo")
    os.utime(src / "values.yaml", (1, 1))  # another mtime: the same bytes
    assert chartpack.pack(src, "charts/demo") == a
    with tarfile.open(fileobj=io.BytesIO(a)) as t:
        assert t.getnames() == ["demo/Chart.yaml", "demo/templates/deployment.yaml", "demo/values.yaml"]
        assert {m.mtime for m in t.getmembers()} == {0} and {m.uid for m in t.getmembers()} == {0}
    (src / "values.yaml").write_text("image: {}\n")
    assert chartpack.pack(src, "charts/demo") != a
    assert chartpack.chart_name(src, "x") == ("demo", "1.2.3")


def test_a_directory_without_chart_yaml_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"charts/x: .* is not a chart directory with a Chart.yaml"):
        chartpack.pack(tmp_path, "charts/x")
    (tmp_path / "Chart.yaml").write_text("name: x\n")
    with pytest.raises(BundleError, match=r"Chart\.yaml needs a name and a version"):
        chartpack.pack(tmp_path, "charts/x")


def test_the_helm_standin_reads_the_packed_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "standin"))
    from k8s_standin.helm import helm_main

    archive = tmp_path / "demo-1.2.3.tgz"
    archive.write_bytes(chartpack.pack(_chart(tmp_path / "c"), "charts/demo"))
    assert helm_main(["show", "values", str(archive)]) == 0
    assert capsys.readouterr().out.startswith("# defaults\nimage:\n  repository: registry.k8s.io/demo")
    assert helm_main(["show", "chart", str(archive)]) == 0
    assert "name: demo\nversion: 1.2.3" in capsys.readouterr().out
