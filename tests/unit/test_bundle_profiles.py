"""Production profile: every image the charts/values need is listed, every entry comes from an
upstream URL or registry and is pinned by the lock (not inline), the lock agrees with the
reviewed table of published pins (PINS.md), nothing test-only or stand-in. Lab profile:
test-only stand-ins."""

from __future__ import annotations

import pathlib
import zipfile

import pytest
import yaml

from appliance_cli.bundle.lockfile import load_lock, lock_path
from appliance_cli.bundle.pins import pin_problems
from appliance_cli.bundle.profile import load_profile
from appliance_cli.content import content_root
from tests._support.paths import ROOT

PINS_MD = ROOT.parent / "shared" / "design" / "PINS.md"

PROD = "appliance-k8s1.23"


@pytest.fixture(scope="module")
def prod():
    return load_profile(PROD)


@pytest.fixture(scope="module")
def prod_lock(prod):
    lock = load_lock(lock_path(prod.source_path), PROD)
    assert lock is not None, "the production profile's lock is missing"
    return lock


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
        "docker.io/flannel/flannel-cni-plugin:v1.2.0",
    ]:
        assert ref in refs
    assert any(r.startswith("docker.io/library/registry:") for r in refs)
    assert any("nfs-subdir-external-provisioner" in r for r in refs)
    assert any("projecthami/hami" in r for r in refs) and any("volcanosh/vc-scheduler" in r for r in refs)
    files = {f.name: f for f in prod.files}
    for name in ("kubeadm", "kubelet", "kubectl"):
        assert files[name].url == f"https://dl.k8s.io/release/v1.23.17/bin/linux/amd64/{name}"
        assert files[name].checksum_url == files[name].url + ".sha256"
    assert {"crictl", "cni-plugins", "containerd", "helm", "controller-python"} <= files.keys()
    # rendered by the roles, not downloaded: no entry (and no unpublished checksum to trust)
    assert not {"kubelet-service", "kubeadm-dropin", "kube-flannel-manifest"} & files.keys()
    # age publishes no checksum file beside its v1.1.1 release tarball:
    # its lock entry is `reviewed`, naming the independent table it was checked against.
    assert all(f.checksum_url for f in prod.files if f.name != "age"), "every file has a published checksum"
    assert "age" in files and files["age"].checksum_url is None
    lock = yaml.safe_load((ROOT / "bundles/profiles/appliance-k8s1.23.lock.yml").read_text())
    assert (
        lock["files"]["age"]["method"] == "reviewed" and "hermit-packages" in lock["files"]["age"]["source"]
    )
    assert all(c.repo for c in prod.charts), "every chart is checked against its helm index"
    assert "v1.23.0" in files["crictl"].url and "v1.1.1" in files["cni-plugins"].url
    assert {c.name for c in prod.charts} >= {
        "gpu-operator",
        "nfs-subdir-external-provisioner",
        "hami",
        "volcano",
    }
    assert prod.apt[0].codename == "focal"


def test_no_standins_and_no_inline_pins(prod) -> None:
    for label, e in prod.entries():
        assert not getattr(e, "test_only", False), label
        assert getattr(e, "source", None) is None, f"{label} points at a local file"
        assert getattr(e, "build", None) is None, f"{label} is a locally built stand-in"
        assert getattr(e, "sha256", None) is None and getattr(e, "digest", None) is None, (
            f"{label}: pins live in the lock"
        )
    for f in [*prod.files, *prod.charts]:
        assert f.url and f.url.startswith("https://") and "standin" not in f.url, f.name
    assert "TO-BE-PINNED" not in prod.source_path.read_text()


def test_what_the_lock_lacks_is_exactly_what_no_published_source_gave(prod, prod_lock) -> None:
    """The lock holds every published pin; what it lacks needs `bundle lock` on a connected host
    and is listed in bundles/README.md. Every lock entry names its method (and reviewed ones the
    source)."""
    problems = pin_problems(prod, prod_lock)
    missing = sorted(p.split(":")[0] for p in problems)
    assert all(p.endswith(": not in the lock") for p in problems), problems
    assert missing == sorted(
        ["apt/ubuntu-focal", "charts/kube-prometheus-stack"]
        + [
            f"images/{n}"
            for n in (
                "cuda-base",
                "nvidia-driver",
                "container-toolkit",
                "k8s-device-plugin",
                "dcgm",
                "dcgm-exporter",
                "k8s-mig-manager",
                "hami",
                "kube-webhook-certgen",
                "vc-controller-manager",
                "vc-scheduler",
                "vc-webhook-manager",
                # Run:ai's prerequisite Prometheus (kube-prometheus-stack 45.7.1): no published digest found
                "kube-webhook-certgen-prometheus",
                "alertmanager",
                "kube-state-metrics",
                "node-exporter",
                "prometheus-operator",
                "prometheus-config-reloader",
                "prometheus",
            )
        ]
    )
    readme = (content_root() / "bundles" / "README.md").read_text()
    for label in missing:
        assert f"`{label}`" in readme, f"{label} is not listed in bundles/README.md"
    for section in ("files", "charts", "images"):
        for name, entry in getattr(prod_lock, section).items():
            assert entry.method in ("published", "helm-index", "registry", "reviewed", "tofu"), name
            assert entry.method != "reviewed" or entry.source, (
                f"{section}/{name}: a reviewed pin names its source"
            )


def _pins_md_rows() -> dict[tuple[str, str], tuple[str, str]]:
    """(section, profile entry name) -> (value, confidence) from PINS.md's tables."""
    rows, section = {}, ""
    for line in PINS_MD.read_text().splitlines():
        if line.startswith("### "):
            section = line.split()[1]
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if section and len(cells) == 5 and cells[1] in ("sha256", "digest") and cells[2].startswith("`"):
            rows[(section, cells[0].split()[0])] = (cells[2].strip("`"), cells[4])
    return rows


@pytest.mark.skipif(not PINS_MD.exists(), reason="../shared/design/PINS.md is absent (a clone on its own)")
def test_locked_values_agree_with_the_high_confidence_published_pins(prod, prod_lock) -> None:
    rows = _pins_md_rows()
    high = {k: v for k, (v, conf) in rows.items() if conf == "high"}
    assert len(high) >= 19, f"PINS.md's table no longer parses ({len(high)} high rows)"
    checked = 0
    for (section, name), value in high.items():
        entry = getattr(prod_lock, section).get(name)
        if entry is None:  # a high row the profile no longer has (e.g. the kubelet unit file)
            assert name not in {e.name for _, e in prod.entries()}, (
                f"{section}/{name} is high-confidence but unlocked"
            )
            continue
        locked = entry.digest if section == "images" else entry.sha256
        assert locked == value, f"{section}/{name}: the lock says {locked}, PINS.md {value}"
        checked += 1
    assert checked >= 18


def test_kube_tools_install_where_the_role_puts_them(prod) -> None:
    """The profile documents install_path; kube_binaries is what installs: they must agree."""
    defaults = yaml.safe_load((content_root() / "roles/kube_binaries/defaults/main.yml").read_text())
    files = {f.name: f for f in prod.files}
    for tool in defaults["kube_binaries_tools"]:
        assert files[tool].install_path == f"{defaults['kube_binaries_install_dir']}/{tool}", tool
    assert files["crictl"].install_path == defaults["kube_binaries_install_dir"]


def test_lab_profile_is_test_only() -> None:
    lab = load_profile("lab")
    assert not lab.production
    assert all(f.test_only for f in lab.files)
    standins = {f.name for f in lab.files if f.source == "tests/standin/k8s_standin"}
    # etcd's tools are real: the lab's etcd image carries them
    assert standins == {"kubeadm", "kubelet", "crictl", "helm"}
    # kubectl is the real client: Debian's, from the apt closure, declared bundled for the cluster's release
    kubectl = {f.name: f for f in lab.files}["kubectl"]
    assert kubectl.from_deb and (kubectl.from_deb.package, kubectl.from_deb.file) == (
        "kubernetes-client",
        "usr/bin/kubectl",
    )
    assert (kubectl.version, kubectl.kubernetes) == ("v1.20.2", "v1.23.17")
    assert any("kubernetes-client" in a.packages for a in lab.apt)
    # helm where the helm role installs it from a production bundle
    helm_defaults = yaml.safe_load((ROOT / "roles" / "helm" / "defaults" / "main.yml").read_text())
    assert {f.name: f for f in lab.files}["helm"].install_path == f"{helm_defaults['helm_install_dir']}/helm"
    # the charts that are not test charts are the real GPU Operator and HAMi archives, pinned by digest
    assert [(c.name, c.test_only, bool(c.sha256)) for c in lab.charts if not c.test_only] == [
        ("gpu-operator", False, True),
        ("hami", False, True),
    ]
    # the CNI plugins: Debian's build packed like the upstream tarball, from a package the lab's apt
    # closure downloads (the roles take it through the production path)
    cni = next(f for f in lab.files if f.name == "cni-plugins")
    assert cni.from_deb and cni.from_deb.package in lab.apt[0].packages and cni.filename.endswith(".tgz")
    assert all(i.test_only and i.build == "busybox" for i in lab.images)
    assert lab.apt[0].codename == "bookworm" and "containerd" in lab.apt[0].packages
    assert not pin_problems(lab, None)


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


# The archive keys each profile pins (bundles/keyrings/README.md says where each file came from).
UBUNTU_ARCHIVE_KEYS = {
    "790BC7277767219C42C86F933B4FE6ACC0B21F32",  # Ubuntu Archive Automatic Signing Key (2012)
    "F6ECB3762474EDA9D21B7022871920D1991BC93C",  # Ubuntu Archive Automatic Signing Key (2018)
}
DEBIAN_12_ARCHIVE_KEYS = {
    "B8B80B5B623EAB6AD8775C45B7C5D7D6350947F8",  # Debian Archive Automatic Signing Key (12/bookworm)
    "05AB90340C0C5E797F44A8C8254CF3B5AEC0A8F0",  # Debian Security Archive Automatic Signing Key (12/bookworm)
    "4D64FEC119C2029067D6E791F8D2585B8783D481",  # Debian Stable Release Key (12/bookworm)
}


@pytest.mark.parametrize(("name", "keys"), [(PROD, UBUNTU_ARCHIVE_KEYS), ("lab", DEBIAN_12_ARCHIVE_KEYS)])
def test_each_apt_entry_pins_its_archive_keyring_and_the_file_matches(name, keys) -> None:
    """`bundle lock` reads an index only through a Release signed by a pinned key: every apt entry
    (the production one above all) names a committed keyring whose sha256 and keys match its pins."""
    from appliance_cli.bundle.lock import archive_keys

    prof = load_profile(name)
    assert prof.apt
    for apt in prof.apt:
        assert apt.keyring is not None, f"apt/{apt.name} names no keyring"
        assert apt.keyring.path.startswith("bundles/keyrings/") and set(apt.keyring.fingerprints) == keys
        trusted = archive_keys(apt, content_root(), f"apt/{apt.name}", prof.production)
        assert trusted is not None and trusted.fingerprints == keys


@pytest.mark.parametrize("profile", [PROD, "lab"])
def test_every_runtime_the_role_installs_is_in_the_profiles_apt_list(profile: str) -> None:
    """container_runtime installs containerd's or docker's packages from the bundle's apt
    repository: both runtimes' packages must be there, or `container_runtime: docker` has nothing
    to install from on an air-gapped site."""
    defaults = yaml.safe_load((ROOT / "roles" / "container_runtime" / "defaults" / "main.yml").read_text())
    wanted = set(defaults["container_runtime_containerd_packages"]) | set(
        defaults["container_runtime_docker_packages"]
    )
    listed = {p for a in load_profile(profile).apt for p in a.packages}
    assert "docker.io" in wanted and wanted <= listed, sorted(wanted - listed)
