"""install-toolkit.sh for real, on this machine, against a tiny bundle (stand-in toolkit wheel +
one dependency + a pip wheel; see tests/_support/toolkit_bundle.py): it installs offline
(in a network namespace with no interfaces up where `unshare` is available), is idempotent,
uses the bundle's controller runtime, and stops with one clear line for each failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from appliance_cli.bundle import load_manifest
from appliance_cli.bundle.model import INSTALL_SCRIPT
from tests._support.toolkit_bundle import TOOLKIT_VERSION, build_toolkit_bundle, fake_runtime

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="install-toolkit.sh runs as root"),
]
TOOLS = ("sh", "sha256sum", "tar", "gzip", "mktemp", "cut", "sed", "grep", "wc", "ln", "id", "cat", "rm")
TOOLS += ("mkdir", "mv", "rmdir")
UNSHARE = shutil.which("unshare")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("bundles")
    plain = build_toolkit_bundle(tmp / "plain").path
    with_rt = build_toolkit_bundle(tmp / "rt", runtime=fake_runtime(tmp / "rt" / "runtime")).path
    return {"plain": plain, "runtime": with_rt}


@pytest.fixture
def bundle(built, tmp_path: Path) -> Path:
    copy = tmp_path / "stick" / "bundle"
    shutil.copytree(built["plain"], copy)
    return copy


def python_dir(tmp: Path, python: str = sys.executable) -> Path:
    """A PATH entry whose python3 is `python` (a Python 3.11+ for these tests)."""
    d = tmp / "pybin"
    d.mkdir(exist_ok=True)
    (d / "python3").unlink(missing_ok=True)
    (d / "python3").symlink_to(python)
    return d


def run(bundle: Path, tmp: Path, path: str, argv_prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {
        "PATH": path,
        "APPLIANCE_PREFIX": str(tmp / "opt"),
        "APPLIANCE_BIN_LINK": str(tmp / "bin" / "appliance"),
        "LANG": "C",
    }
    offline = (UNSHARE, "--net") if UNSHARE else ()
    argv = [*argv_prefix, *offline, "sh", str(bundle / INSTALL_SCRIPT)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


def default_path(tmp: Path) -> str:
    return f"{python_dir(tmp)}:/usr/local/bin:/usr/bin:/bin"


def test_installs_offline_and_a_rerun_changes_nothing(bundle: Path, tmp_path: Path) -> None:
    first = run(bundle, tmp_path, default_path(tmp_path))
    assert first.returncode == 0, first.stderr
    assert f"installed: appliance {TOOLKIT_VERSION} in {tmp_path / 'opt' / 'venv'}" in first.stdout
    assert f"controller Python: {python_dir(tmp_path) / 'python3'}" in first.stdout
    assert "next:\n  appliance init /root/site" in first.stdout
    assert "appliance install --site /root/site" in first.stdout
    link = tmp_path / "bin" / "appliance"
    assert os.readlink(link) == str(tmp_path / "opt" / "venv" / "bin" / "appliance")
    out = subprocess.run([str(link)], capture_output=True, text=True, check=True).stdout
    assert "hello from tinydep" in out  # the dependency came from the bundle too
    assert not list((tmp_path / "opt").glob(".install.*"))  # the temp dir is gone

    venv_mtime = (tmp_path / "opt" / "venv").stat().st_mtime_ns
    second = run(bundle, tmp_path, default_path(tmp_path))
    assert second.returncode == 0, second.stderr
    assert "already installed from this bundle, nothing to do" in second.stdout
    assert (tmp_path / "opt" / "venv").stat().st_mtime_ns == venv_mtime


def test_uses_the_bundles_controller_runtime(built, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(built["runtime"], bundle)
    m, _ = load_manifest(bundle)
    rt = next(a for a in m.artifacts if a.role == "controller-runtime")
    r = run(bundle, tmp_path, "/usr/local/bin:/usr/bin:/bin")
    assert r.returncode == 0, r.stderr
    py = tmp_path / "opt" / "python" / "bin" / "python3"
    assert f"unpacking the controller runtime {rt.files[0].path}" in r.stdout
    assert f"controller Python: {py} " in r.stdout
    assert (tmp_path / "opt" / "python" / ".appliance-runtime").read_text().strip() == rt.digest[7:]
    again = run(bundle, tmp_path, "/usr/local/bin:/usr/bin:/bin")
    assert again.returncode == 0 and "nothing to do" in again.stdout


def _one_error(r: subprocess.CompletedProcess, code: int) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    errors = [line for line in r.stderr.splitlines() if line.startswith("install-toolkit.sh: error: ")]
    assert len(errors) == 1, r.stderr
    return errors[0]


def test_not_root(bundle: Path, tmp_path: Path) -> None:
    setpriv = shutil.which("setpriv")
    if not setpriv:
        pytest.skip("setpriv (util-linux) is missing")
    os.chmod(tmp_path, 0o755)
    for d in [bundle, *bundle.parents]:
        if d == Path("/"):
            break
        os.chmod(d, os.stat(d).st_mode | 0o005)
    nobody = (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")
    r = subprocess.run(
        [*nobody, "sh", str(bundle / INSTALL_SCRIPT)], capture_output=True, text=True, check=False
    )
    assert "run it as root: sudo sh" in _one_error(r, 3)


def test_manifest_missing(bundle: Path, tmp_path: Path) -> None:
    (bundle / "manifest.json").unlink()
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path)), 4)
    assert f"{bundle / 'manifest.json'} is missing" in err


def test_edited_script_is_refused(bundle: Path, tmp_path: Path) -> None:
    with open(bundle / INSTALL_SCRIPT, "a") as f:
        f.write("# edited\n")
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path)), 4)
    assert "manifest.json does not record this script's sha256" in err
    assert not (tmp_path / "opt").exists()


def _wheel_blob(bundle: Path, dist: str) -> tuple[str, Path]:
    m, _ = load_manifest(bundle)
    (f,) = next(a for a in m.artifacts if a.kind == "wheel" and a.name == dist).files
    return f.path, bundle / "blobs" / "sha256" / f.digest[7:]


def test_missing_wheel_blob_is_named(bundle: Path, tmp_path: Path) -> None:
    name, blob = _wheel_blob(bundle, "tinydep")
    blob.unlink()
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path)), 4)
    assert f"wheel {name}: blob sha256:{blob.name} is missing" in err
    assert not (tmp_path / "opt" / "venv").exists()


def test_corrupt_wheel_blob_is_named(bundle: Path, tmp_path: Path) -> None:
    name, blob = _wheel_blob(bundle, "appliance_toolkit")
    data = bytearray(blob.read_bytes())
    data[10] ^= 0xFF
    blob.write_bytes(bytes(data))
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path)), 4)
    assert f"wheel {name}: content does not match its sha256" in err and "corrupt" in err


def test_no_fitting_python_is_named(bundle: Path, tmp_path: Path) -> None:
    """Only a python3 that is 3.8 (focal's) and no controller runtime in the bundle."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for t in TOOLS:
        (tools / t).symlink_to(shutil.which(t) or f"/bin/{t}")
    old = tools / "python3"
    old.write_text("#!/bin/sh\necho 3.8\n")
    old.chmod(0o755)
    err = _one_error(run(bundle, tmp_path, str(tools)), 3)
    assert "no controller Python: the toolkit needs CPython 3.11 or newer" in err
    assert "carries no controller runtime" in err and f"{old}=3.8" in err
