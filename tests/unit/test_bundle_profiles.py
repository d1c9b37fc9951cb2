"""Production profile completeness: every image the charts/values need is listed, every file is
pinned by URL + checksum field, nothing test-only or stand-in. Lab profile: test-only stand-ins."""

from __future__ import annotations

import pathlib
import zipfile

import pytest
import yaml

from appliance_cli.bundle.profile import PLACEHOLDER, load_profile, pin_problems
from appliance_cli.content import content_root

PROD = "appliance-k8s1.23"


@pytest.fixture(scope="module")
def prod():
    return load_profile(PROD)


def _values_images(values: dict) -> set[str]:
    """Image references the GPU Operator deploys with our values (enabled components only)."""
    refs = set()

    def walk(node: dict) -> None:
        if not isinstance(node, dict) or node.get("enabled") is False:
            return
        if {"repository", "image", "version"} <= node.keys():
            tag = node["version"] + (f"-{node['osTag']}" if node.get("osTag") else "")
            refs.add(f"{node['repository']}/{node['image']}:{tag}")
        if "image" in node and isinstance(node["image"], dict) and "tag" in node["image"]:
            refs.add(f"{node['image']['repository']}:{node['image']['tag']}")
        for v in node.values():
            walk(v)

    walk(values)
    return refs


def test_profile_loads_and_is_production(prod) -> None:
    assert prod.production and prod.name == PROD


def test_every_chart_image_is_listed(prod) -> None:
    listed = {i.reference for i in prod.images}
    for chart in prod.charts:
        missing = set(chart.images) - listed
        assert not missing, f"chart {chart.name} needs images not in the profile: {sorted(missing)}"


def test_gpu_operator_values_images_all_listed(prod) -> None:
    chart = next(c for c in prod.charts if c.name == "gpu-operator")
    values = yaml.safe_load((content_root() / chart.values_file).read_text())
    needed = _values_images(values)
    assert len(needed) >= 10
    assert needed <= set(chart.images), sorted(needed - set(chart.images))
    assert values["operator"]["defaultRuntime"] == "containerd"


def test_required_components_present(prod) -> None:
    refs = {i.reference for i in prod.images}
    for ref in [
        "registry.k8s.io/kube-apiserver:v1.23.17",
        "registry.k8s.io/kube-controller-manager:v1.23.17",
        "registry.k8s.io/kube-scheduler:v1.23.17",
        "registry.k8s.io/kube-proxy:v1.23.17",
        "registry.k8s.io/pause:3.6",
        "registry.k8s.io/etcd:3.5.6-0",
        "registry.k8s.io/coredns/coredns:v1.8.6",
        "docker.io/flannel/flannel:v0.22.3",
        "docker.io/flannel/flannel-cni-plugin:v1.1.2",
    ]:
        assert ref in refs
    assert any(r.startswith("docker.io/library/registry:") for r in refs)
    assert any("nfs-subdir-external-provisioner" in r for r in refs)
    assert any("projecthami/hami" in r for r in refs) and any("volcanosh/vc-scheduler" in r for r in refs)
    files = {f.name: f for f in prod.files}
    for name in ("kubeadm", "kubelet", "kubectl"):
        assert files[name].url == f"https://dl.k8s.io/release/v1.23.17/bin/linux/amd64/{name}"
    assert {"kubelet-service", "kubeadm-dropin", "crictl", "cni-plugins"} <= files.keys()
    assert "v1.23.0" in files["crictl"].url and "v1.1.1" in files["cni-plugins"].url
    assert {c.name for c in prod.charts} >= {
        "gpu-operator",
        "nfs-subdir-external-provisioner",
        "hami",
        "volcano",
    }
    assert prod.apt[0].codename == "focal"


def test_every_entry_pinned_no_standins(prod) -> None:
    for label, e in prod.entries():
        assert not getattr(e, "test_only", False), label
        assert getattr(e, "source", None) is None, f"{label} points at a local file"
        assert getattr(e, "build", None) is None, f"{label} is a locally built stand-in"
    for f in [*prod.files, *prod.charts]:
        assert f.url and f.url.startswith("https://") and f.sha256, f.name
        assert "standin" not in f.url
    for i in prod.images:
        assert i.digest, i.name
    # whatever is not a placeholder must be a well-formed pin
    assert all(PLACEHOLDER in p for p in pin_problems(prod))


def test_lab_profile_is_test_only() -> None:
    lab = load_profile("lab")
    assert not lab.production
    assert all(f.test_only for f in lab.files)
    standins = {f.name for f in lab.files if f.source == "tests/standin/k8s_standin"}
    assert standins == {"kubeadm", "kubelet", "kubectl", "crictl"}
    # the CNI plugins: Debian's build packed like the upstream tarball, from a package the lab's apt
    # closure downloads (the roles take it through the production path)
    cni = next(f for f in lab.files if f.name == "cni-plugins")
    assert cni.from_deb and cni.from_deb.package in lab.apt[0].packages and cni.filename.endswith(".tgz")
    assert all(i.test_only and i.build == "busybox" for i in lab.images)
    assert lab.apt[0].codename == "bookworm" and "containerd" in lab.apt[0].packages
    assert not pin_problems(lab)


def test_production_wheels_target_the_focal_controller_not_the_build_host(prod) -> None:
    """Built on a newer host, pip would pick wheels for that host's glibc (cryptography's
    manylinux_2_34 needs glibc 2.34; Ubuntu 20.04 has 2.31)."""
    import re

    for w in prod.wheels:
        assert w.python_version == "3.11", w.name
        assert w.platforms, w.name
        for tag in w.platforms:
            m = re.fullmatch(r"manylinux_2_(\d+)_x86_64", tag)
            assert m is None or int(m.group(1)) <= 31, f"{w.name}: {tag} needs glibc > 2.31"


def _platform_wheel(dest: pathlib.Path, dist: str, version: str, tag: str) -> None:
    """A minimal binary wheel of DIST for TAG (e.g. cp311-cp311-manylinux_2_17_x86_64)."""
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}.py": b"X = 1\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
    }
    with zipfile.ZipFile(dest / f"{dist}-{version}-{tag}.whl", "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", "")


def test_platform_wheels_are_downloaded_binary_only_for_the_target(prod, monkeypatch, tmp_path) -> None:
    """Real pip against a local index, with the production profile's own wheel spec: of a
    dependency's sdist, a manylinux2014 wheel (fits focal's glibc 2.31) and a newer one for glibc
    2.34, only the fitting wheel is taken; the toolkit's own wheel is built without its dependencies."""
    from appliance_cli.bundle import build
    from appliance_cli.bundle.profile import WheelSpec

    index = tmp_path / "index"
    index.mkdir()
    _platform_wheel(index, "dep", "1.0", "cp311-cp311-manylinux_2_17_x86_64")
    _platform_wheel(index, "dep", "1.1", "cp311-cp311-manylinux_2_34_x86_64")  # too new for focal's glibc
    (index / "dep-1.2.tar.gz").write_bytes(b"not built: binary only")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "setup.py").write_text(
        "from setuptools import setup\nsetup(name='proj', version='2.0', py_modules=['proj'])\n"
    )
    (proj / "proj.py").write_text("X = 1\n")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")
    monkeypatch.setattr(build, "project_dependencies", lambda project: ["dep"])
    toolkit = next(w for w in prod.wheels if w.project)
    spec = WheelSpec(
        name="proj", project=True, platforms=toolkit.platforms, python_version=toolkit.python_version
    )
    out = tmp_path / "wheels"
    build._download_for_platform(spec, proj, out, "wheel/proj")
    assert sorted(p.name for p in out.iterdir()) == [
        "dep-1.0-cp311-cp311-manylinux_2_17_x86_64.whl",
        "proj-2.0-py3-none-any.whl",
    ]


def test_the_toolkits_dependencies_are_what_its_wheel_pulls() -> None:
    from appliance_cli.bundle import build

    deps = build.project_dependencies(content_root())
    assert "ansible-core>=2.18,<2.20" in deps and any(d.startswith("ansible-runner") for d in deps)
