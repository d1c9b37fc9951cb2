"""Lab bundles at another Kubernetes version (no tests here): bundles/profiles/lab.yml with the
Kubernetes stand-in tools and the control-plane images at that version. The "old" one an upgrade
test starts from is one patch back (v1.23.16); `build_lab_bundle_at` builds one a minor up as well
(v1.24.17: the minor upgrade test's target).

What moves with the cluster's version, and nothing else:
* files kubeadm, kubelet: `version: <version>-standin` (the builder stamps that version into
  the zipapp: appliance_cli/bundle/zipapp.py `build_modules`); kubectl, Debian's real v1.20 client,
  stays that client and is bundled `kubernetes: <version>`; helm and crictl keep theirs;
* images kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy: `:<version>` (what
  kubeadm init pulls for kubernetesVersion <version>); pause 3.6, etcd 3.5.6-0 and CoreDNS v1.8.6 are
  kubeadm 1.23's constants, the same for every 1.23 patch; another minor's kubeadm constants that
  differ are added beside them (1.24: pause 3.7, which `kubeadm upgrade apply` pulls; 3.6 stays, the
  sandbox image containerd and the kubelets keep);
* chart hami's `images:` entry registry.k8s.io/kube-scheduler:<lab version>: HAMi tags the control
  plane's kube-scheduler image with the cluster's version (bundles/values/hami-2.4.1.yaml).

And containerd one Debian build back: `containerd=OLD_CONTAINERD` in the apt packages (apt-get's
exact-version syntax; bookworm-security still carries +deb12u2, bookworm itself +deb12u3, which
the session's lab bundle resolves), so that `upgrade apply` has a container runtime to upgrade.

And, given a directory for it (`write_old_lab_profile` gives one), one chart an older version, so
that `upgrade apply` has a chart to upgrade: the test chart nfs-subdir-external-provisioner copied
with `version: 4.0.17` in its Chart.yaml (the same templates, values and image).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from appliance_cli.bundle import BuildOptions, build_bundle
from appliance_cli.bundle.completeness import kubeadm_constants
from appliance_cli.content import content_root

LAB_PROFILE = content_root() / "bundles" / "profiles" / "lab.yml"
KUBERNETES_FILES = ("kubeadm", "kubelet", "kubectl")
STANDIN_FILES = ("kubeadm", "kubelet")  # kubectl is the real client: only what it is bundled for moves
CONTROL_PLANE_IMAGES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
_VERSION = re.compile(r"v1\.\d+\.\d+")
OLD_CHART, OLD_CHART_VERSION = "nfs-subdir-external-provisioner", "4.0.17"
OLD_CONTAINERD = "1.6.20~ds1-1+deb12u2"  # bookworm-security's build before bookworm's +deb12u3


def _retag(reference: str, version: str) -> str:
    return reference.rsplit(":", 1)[0] + ":" + version


def _kubeadm_images(prof: dict[str, Any], version: str) -> None:
    """kubeadm's own images of `version`'s minor that the lab profile (1.23) lacks, added beside theirs."""
    have = {i["reference"] for i in prof["images"]}
    for name, tag in kubeadm_constants(version).items():
        entry = next(i for i in prof["images"] if i["name"] == name)
        ref = _retag(entry["reference"], tag)
        if ref not in have:
            prof["images"].append({**entry, "name": f"{name}-{tag}", "reference": ref})


def old_lab_profile(
    version: str = "v1.23.16", old_chart: Path | None = None, old_containerd: bool = True
) -> dict[str, Any]:
    """The lab profile (as loaded YAML) with what follows the cluster's version at `version`; with
    `old_chart` (a chart directory `old_chart_dir` made), OLD_CHART at OLD_CHART_VERSION from there;
    with `old_containerd`, containerd pinned at OLD_CONTAINERD. Not only older versions: any
    version the stand-in models (1.23.x, 1.24.x; an upgrade's target takes neither older part)."""
    if not _VERSION.fullmatch(version):
        raise ValueError(f"{version}: not a Kubernetes version vX.Y.Z")
    prof = yaml.safe_load(LAB_PROFILE.read_text())
    lab_version = next(f["version"] for f in prof["files"] if f["name"] == "kubeadm").removesuffix("-standin")
    prof["description"] = f"{prof['description']} (Kubernetes {version}: tests/_support/upgrade_bundles.py)"
    for f in prof["files"]:
        if f["name"] in STANDIN_FILES:
            f["version"] = f"{version}-standin"
        elif f["name"] in KUBERNETES_FILES:
            f["kubernetes"] = version
    for i in prof["images"]:
        if i["name"] in CONTROL_PLANE_IMAGES:
            i["reference"] = _retag(i["reference"], version)
    if old_containerd:
        for repo in prof["apt"]:
            repo["packages"] = [
                f"containerd={OLD_CONTAINERD}" if p == "containerd" else p for p in repo["packages"]
            ]
    _kubeadm_images(prof, version)
    scheduler = f"registry.k8s.io/kube-scheduler:{lab_version}"
    for c in prof["charts"]:
        if c["name"] == "hami":
            c["images"] = [_retag(r, version) if r == scheduler else r for r in c["images"]]
        if c["name"] == OLD_CHART and old_chart is not None:
            c["version"], c["source"] = OLD_CHART_VERSION, str(old_chart.resolve())
    return prof


def old_chart_dir(path: Path) -> Path:
    """OLD_CHART's test chart copied to `path`, its Chart.yaml saying OLD_CHART_VERSION."""
    prof = yaml.safe_load(LAB_PROFILE.read_text())
    entry = next(c for c in prof["charts"] if c["name"] == OLD_CHART)
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(content_root() / entry["source"], path)
    meta = path / "Chart.yaml"
    text = meta.read_text()
    line = f"version: {entry['version']}\n"
    if line not in text:
        raise ValueError(f"{meta}: no '{line.strip()}' line to change")
    meta.write_text(text.replace(line, f"version: {OLD_CHART_VERSION}\n"))
    return path


def write_old_lab_profile(path: Path, version: str = "v1.23.16", older_parts: bool = True) -> Path:
    """`old_lab_profile` as a profile file (no lock beside it: the lab profile has none either), its
    older chart in a directory beside it and containerd pinned older (unless `older_parts` is false:
    the lab's charts and containerd, as an upgrade's target bundle has them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    chart = old_chart_dir(path.parent / f"{OLD_CHART}-{OLD_CHART_VERSION}") if older_parts else None
    path.write_text(yaml.safe_dump(old_lab_profile(version, chart, older_parts), sort_keys=False))
    return path


def build_lab_bundle_at(out: Path, cache: Path, version: str, older_parts: bool = False) -> Path:
    """Build the lab bundle at `version` into `out` (incrementally, with the build cache `cache`, as
    the e2e `lab_bundle` fixture builds the lab's; share that cache to reuse its apt closure and
    images) and return `out`. The caller signs it (`appliance_cli.bundle.sign_bundle`). Needs root,
    as any lab bundle build (the apt closure is resolved in a chroot)."""
    profile = write_old_lab_profile(
        out.parent / f"{out.name}-profile" / f"lab-{version}.yml", version, older_parts
    )
    res = build_bundle(BuildOptions(profile=profile, out=out, cache=cache, repo_root=content_root()))
    return res.path


def build_old_lab_bundle(out: Path, cache: Path, version: str = "v1.23.16") -> Path:
    """The old lab bundle (`build_lab_bundle_at` with OLD_CHART at OLD_CHART_VERSION and containerd
    at OLD_CONTAINERD)."""
    return build_lab_bundle_at(out, cache, version, older_parts=True)
