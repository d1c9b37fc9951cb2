"""`bundle inspect --check-complete`: every image the roles and charts pull is in the profile and
overridden to the private registry. The chart rules read the REAL charts' values.yaml (the
shared fixtures, verified by their published digests); without them those cases skip."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from appliance_cli.bundle.completeness import check_profile, path_of, role_pulls
from appliance_cli.bundle.profile import load_profile
from appliance_cli.cli.main import main
from appliance_cli.content import content_root
from tests._support.paths import ROOT

CHARTS = ROOT.parent / "shared" / "fixtures" / "charts"
needs_charts = pytest.mark.skipif(
    not (CHARTS / "gpu-operator-v24.6.2.tgz").is_file(),
    reason="../shared/fixtures/charts is absent (a clone on its own)",
)
PROD = "appliance-k8s1.23"


def _copy(tmp_path: Path, edit=None, values_edit=None) -> Path:
    """A copy of the production profile (and its values files) to break one thing in."""
    data = yaml.safe_load((content_root() / "bundles/profiles" / f"{PROD}.yml").read_text())
    data = {k: v for k, v in data.items() if not str(k).startswith("x-")}
    data.pop("wheels", None)
    if edit:
        edit(data)
    if values_edit:
        for chart in data["charts"]:
            if chart["name"] == values_edit[0]:
                src = content_root() / chart["values_file"]
                values = yaml.safe_load(src.read_text())
                values_edit[1](values)
                dst = tmp_path / Path(chart["values_file"]).name
                dst.write_text(yaml.safe_dump(values))
                chart["values_file"] = str(dst)
    path = tmp_path / "prod-copy.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_kubeadm_images_for_1_23_17_are_kubeadms_list() -> None:
    """What `kubeadm config images list --kubernetes-version v1.23.17 --image-repository R` prints
    (with CoreDNS under R/coredns, as the control_plane role sets dns.imageRepository)."""
    kubeadm = [
        path_of(ref) for source, _, ref in role_pulls("v1.23.17") if source.startswith("control_plane")
    ]
    assert kubeadm == [
        "kube-apiserver:v1.23.17",
        "kube-controller-manager:v1.23.17",
        "kube-scheduler:v1.23.17",
        "kube-proxy:v1.23.17",
        "pause:3.6",
        "etcd:3.5.6-0",
        "coredns/coredns:v1.8.6",
    ]


@needs_charts
def test_the_production_profile_is_complete() -> None:
    res = check_profile(load_profile(PROD), CHARTS)
    assert res.problems() == []
    refs = {p.reference for p in res.pulls}
    assert "registry.k8s.io/kube-scheduler:v1.23.17" in refs  # HAMi's scheduler, not the aliyun default
    assert "docker.io/liangjw/kube-webhook-certgen:v1.1.1" in refs  # HAMi's certgen on k8s >= 1.22
    assert "nvcr.io/nvidia/driver:550.90.07-ubuntu20.04" in refs  # the driver tag carries the node OS
    assert "registry.k8s.io/nfd/node-feature-discovery:v0.16.3" in refs  # the GPU Operator's NFD subchart
    assert len(res.pulls) >= 30


@needs_charts
def test_an_image_missing_from_the_profile_is_named(tmp_path: Path) -> None:
    def drop(d: dict) -> None:
        d["images"] = [i for i in d["images"] if i["name"] != "kube-webhook-certgen"]

    res = check_profile(load_profile(_copy(tmp_path, drop)), CHARTS)
    assert res.problems() == [
        "chart hami: scheduler.patch.imageNew pulls liangjw/kube-webhook-certgen:v1.1.1, which profile "
        "appliance-k8s1.23 lacks"
    ]


@needs_charts
def test_a_chart_key_left_at_its_upstream_default_is_not_overridden(tmp_path: Path) -> None:
    """HAMi's values without our kube-scheduler: the chart's aliyun default would be pulled."""

    def forget(values: dict) -> None:
        del values["scheduler"]["kubeScheduler"]

    res = check_profile(load_profile(_copy(tmp_path, values_edit=("hami", forget))), CHARTS)
    assert res.problems() == [
        "chart hami: scheduler.kubeScheduler.image = "
        "registry.cn-hangzhou.aliyuncs.com/google_containers/kube-scheduler:v1.23.17 is not overridden to "
        "the private registry"
    ]


@needs_charts
def test_a_gpu_operator_component_enabled_without_our_override_is_named(tmp_path: Path) -> None:
    """Turning on GDS (disabled on the appliance) pulls nvidia-fs from the chart's default."""

    def enable(values: dict) -> None:
        values["gds"] = {"enabled": True}

    res = check_profile(load_profile(_copy(tmp_path, values_edit=("gpu-operator", enable))), CHARTS)
    assert res.problems() == [
        "chart gpu-operator: gds = nvcr.io/nvidia/cloud-native/nvidia-fs:2.17.5 is not overridden to the private registry"
    ]


def test_a_role_image_missing_from_the_profile_is_named(tmp_path: Path) -> None:
    def drop(d: dict) -> None:
        d["images"] = [i for i in d["images"] if i["name"] != "flannel-cni-plugin"]

    res = check_profile(load_profile(_copy(tmp_path, drop)), None)
    assert (
        "cni_flannel: cni_flannel_cni_plugin_image pulls flannel/flannel-cni-plugin:v1.2.0, which profile "
        "appliance-k8s1.23 lacks"
    ) in res.problems()


@needs_charts
def test_cli_check_complete(tmp_path: Path, capsys) -> None:
    assert main(["bundle", "inspect", "--check-complete", "--profile", PROD, "--charts", str(CHARTS)]) == 0
    out = capsys.readouterr().out
    assert (
        "profile appliance-k8s1.23: all 30 images the roles and charts pull are listed and overridden" in out
    )
    bad = _copy(tmp_path, lambda d: d["images"].pop(0))
    rc = main(["bundle", "inspect", "--check-complete", "--profile", str(bad), "--charts", str(CHARTS)])
    err = capsys.readouterr().err
    assert rc == 4 and "kube-apiserver:v1.23.17, which profile appliance-k8s1.23 lacks" in err
    assert "Traceback" not in err
