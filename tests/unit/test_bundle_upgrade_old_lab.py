"""The old lab bundle's profile (tests/_support/upgrade_bundles.py): it differs from the lab
profile only where the cluster's version shows and in its containerd pin, and is complete for
that version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.bundle.completeness import check_profile
from appliance_cli.bundle.profile import load_profile
from appliance_cli.bundle.zipapp import build_modules
from tests._support.paths import ROOT
from tests._support.upgrade_bundles import LAB_PROFILE, OLD_CONTAINERD, old_lab_profile, write_old_lab_profile

ROOT_CHARTS = ROOT / "tests" / "fixtures" / "charts"


def diff(a: Any, b: Any, where: tuple = ()) -> list[tuple[tuple, Any, Any]]:
    """(path, lab's, old's) for every leaf that differs (same shape expected)."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return [d for k in a for d in diff(a[k], b[k], (*where, k))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in diff(x, y, (*where, i))]
    return [] if a == b else [(where, a, b)]


def test_the_old_profile_differs_only_where_the_version_shows() -> None:
    lab = yaml.safe_load(LAB_PROFILE.read_text())
    old = old_lab_profile("v1.23.16")
    changes = diff(lab, old)
    got = {(w[0], lab[w[0]][w[1]]["name"], a, b) for w, a, b in changes if w[0] not in ("description", "apt")}
    assert got == {
        *(("files", n, "v1.23.17-standin", "v1.23.16-standin") for n in ("kubeadm", "kubelet")),
        ("files", "kubectl", "v1.23.17", "v1.23.16"),  # Debian's client: only what it is bundled for moves
        *(("images", n, f"registry.k8s.io/{n}:v1.23.17", f"registry.k8s.io/{n}:v1.23.16")
          for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")),
        ("charts", "hami", "registry.k8s.io/kube-scheduler:v1.23.17", "registry.k8s.io/kube-scheduler:v1.23.16"),
    }  # fmt: skip
    # containerd one Debian build back, pinned with apt-get's syntax
    assert [(w, a, b) for w, a, b in changes if w[0] == "apt"] == [
        (("apt", 0, "packages", 0), "containerd", f"containerd={OLD_CONTAINERD}")
    ]
    assert len(changes) == len(got) + 2  # and the description says what it is
    versions = {f["name"]: f["version"] for f in old["files"]}
    assert all(build_modules(n, versions[n]) for n in ("kubeadm", "kubelet"))
    assert old["name"] == "lab" and old["production"] is False


def test_the_old_profile_loads_and_is_complete_for_its_version(tmp_path: Path) -> None:
    prof = load_profile(write_old_lab_profile(tmp_path / "lab-v1.23.16.yml"))
    old = check_profile(prof, None, "v1.23.16")
    lab = check_profile(load_profile(LAB_PROFILE), None, "v1.23.17")
    # what the lab profile leaves out on purpose (the GPU driver images), and nothing more
    assert [p.reference for p in old.pulls if not p.listed] == [
        p.reference for p in lab.pulls if not p.listed
    ]
    assert any("kube-scheduler:v1.23.16" in p.reference for p in old.pulls if p.listed)
    unused = [n for n in old.notes if "no role or chart pulls it" in n]
    assert unused == [n for n in lab.notes if "no role or chart pulls it" in n]  # the same few (busybox ...)


def test_a_bad_version_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Kubernetes version"):
        old_lab_profile("1.23.16")


def test_the_written_profile_carries_an_older_chart_that_packs(tmp_path: Path) -> None:
    from appliance_cli.bundle import chartpack
    from tests._support.upgrade_bundles import OLD_CHART, OLD_CHART_VERSION

    prof = load_profile(write_old_lab_profile(tmp_path / "lab-v1.23.16.yml"))
    spec = next(c for c in prof.charts if c.name == OLD_CHART)
    lab = next(c for c in load_profile(LAB_PROFILE).charts if c.name == OLD_CHART)
    assert (spec.version, lab.version) == (OLD_CHART_VERSION, "4.0.18")
    src = Path(spec.source or "")
    assert chartpack.chart_name(src, "t") == (OLD_CHART, OLD_CHART_VERSION)
    assert chartpack.pack(src, "t") != chartpack.pack(ROOT_CHARTS / OLD_CHART, "t")


def test_the_1_24_profile_adds_kubeadm_1_24s_pause_and_is_complete_for_1_24(tmp_path: Path) -> None:
    lab = yaml.safe_load(LAB_PROFILE.read_text())
    new = old_lab_profile("v1.24.17")
    added = [i for i in new["images"] if i["name"] not in {x["name"] for x in lab["images"]}]
    assert [(i["name"], i["reference"]) for i in added] == [("pause-3.7", "registry.k8s.io/pause:3.7")]
    assert "registry.k8s.io/pause:3.6" in {i["reference"] for i in new["images"]}  # containerd's sandbox
    versions = {f["name"]: (f["version"], f.get("kubernetes")) for f in new["files"]}
    assert versions["kubeadm"] == ("v1.24.17-standin", None) and versions["kubectl"][1] == "v1.24.17"
    written = write_old_lab_profile(tmp_path / "lab-v1.24.17.yml", "v1.24.17", older_parts=False)
    packages = [p for r in yaml.safe_load(written.read_text())["apt"] for p in r["packages"]]
    assert "containerd" in packages and not [p for p in packages if p.startswith("containerd=")]  # the lab's
    prof = load_profile(written)
    assert next(c for c in prof.charts if c.name == "nfs-subdir-external-provisioner").version == "4.0.18"
    report = check_profile(prof, None, "v1.24.17")
    lab_report = check_profile(load_profile(LAB_PROFILE), None, "v1.23.17")
    assert [p.reference for p in report.pulls if not p.listed] == [
        p.reference for p in lab_report.pulls if not p.listed
    ]
    assert any(p.reference.endswith("/pause:3.7") and p.listed for p in report.pulls)
    # without kubeadm 1.24's pause the lab profile is not complete for 1.24
    lab_at_124 = check_profile(load_profile(LAB_PROFILE), None, "v1.24.17")
    assert [p.reference for p in lab_at_124.pulls if not p.listed and p.reference.endswith("pause:3.7")]
