"""Helpers (no tests) for install-toolkit.sh: a tiny bundle that carries a stand-in toolkit
wheel (an `appliance` command that prints its version, plus one dependency), a pip wheel made
from the pip running these tests, and optionally a fake controller runtime. Offline throughout."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import io
import os
import sys
import tarfile
import zipfile
from contextlib import contextmanager
from pathlib import Path

from tests._support.bundles import build, make_profile

TOOLKIT_VERSION = "0.1.0"

FAKE_TOOLKIT = f"""import sys

import tinydep


def main():
    if sys.argv[1:] == ["--version"]:
        print("appliance {TOOLKIT_VERSION}")
        return 0
    if sys.argv[1:] == ["completion", "bash"]:
        print("complete -W 'install status' appliance")
        return 0
    print("stand-in appliance", tinydep.GREETING, sys.prefix)
    return 0
"""


def _record_line(name: str, data: bytes) -> str:
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={h},{len(data)}"


def make_wheel(
    dest: Path,
    dist: str,
    version: str,
    files: dict[str, bytes],
    requires: tuple[str, ...] = (),
    scripts: dict[str, str] | None = None,
) -> Path:
    """A minimal valid py3-none-any wheel (METADATA, WHEEL, entry points, RECORD)."""
    norm = dist.replace("-", "_")
    info = f"{norm}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    content = dict(files)
    content[f"{info}/METADATA"] = meta.encode()
    content[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: appliance-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    if scripts:
        eps = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
        content[f"{info}/entry_points.txt"] = eps.encode()
    record = [_record_line(n, d) for n, d in content.items()] + [f"{info}/RECORD,,"]
    content[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{norm}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in content.items():
            z.writestr(name, data)
    return path


def pip_wheel(dest: Path) -> Path:
    """A wheel of the pip running the tests (no network to download one): pip runs from it as
    `python pip-X.whl/pip`, which is all install-toolkit.sh asks of it."""
    version = importlib.metadata.version("pip")
    path = dest / f"pip-{version}-py3-none-any.whl"
    if path.is_file():
        return path
    spec = importlib.util.find_spec("pip")
    assert spec and spec.submodule_search_locations
    pkg = Path(next(iter(spec.submodule_search_locations)))
    files = {
        f"pip/{p.relative_to(pkg).as_posix()}": p.read_bytes()
        for p in sorted(pkg.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
    return make_wheel(dest, "pip", version, files)


def toolkit_wheels(dest: Path) -> list[Path]:
    return [
        make_wheel(
            dest,
            "appliance-toolkit",
            TOOLKIT_VERSION,
            {"fake_appliance.py": FAKE_TOOLKIT.encode()},
            requires=("tinydep",),
            scripts={"appliance": "fake_appliance:main"},
        ),
        make_wheel(dest, "tinydep", "1.0", {"tinydep.py": b"GREETING = 'hello from tinydep'\n"}),
    ]


def fake_runtime(dest: Path, python: str = sys.executable, top: str = "python") -> Path:
    """A stand-in for python-build-standalone's install_only tarball: <top>/bin/python3 execs `python`."""
    wrapper = f'#!/bin/sh\nexec "{python}" "$@"\n'.encode()
    path = dest / "cpython-3.11.99+test-x86_64-unknown-linux-gnu-install_only.tar.gz"
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for d in (top, f"{top}/bin"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(ti)
        ti = tarfile.TarInfo(f"{top}/bin/python3")
        ti.mode, ti.size = 0o755, len(wrapper)
        tar.addfile(ti, io.BytesIO(wrapper))
    return path


@contextmanager
def offline_pip():
    """`bundle build` runs `pip wheel`: here on local wheel files only."""
    saved = os.environ.get("PIP_NO_INDEX")
    os.environ["PIP_NO_INDEX"] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PIP_NO_INDEX", None)
        else:
            os.environ["PIP_NO_INDEX"] = saved


def toolkit_profile(tmp: Path, with_pip: bool = True, runtime: Path | None = None, **runtime_kw) -> Path:
    wheels_dir = tmp / "wheels-src"
    reqs = [str(p) for p in toolkit_wheels(wheels_dir)]
    if with_pip:
        reqs.append(str(pip_wheel(wheels_dir)))
    extra: dict = {"wheels": [{"name": "appliance-toolkit", "requirements": reqs}]}
    files: dict[str, bytes] = {"tool-a": b"#!/bin/sh\necho a\n"}
    prof = make_profile(tmp, files=files, images=[], extra=extra)
    if runtime is not None:
        import yaml

        data = yaml.safe_load(prof.read_text())
        data["files"].append(
            {
                "name": "controller-python",
                "version": runtime_kw.get("version", "3.11.99"),
                "source": str(runtime.relative_to(tmp)),
                "test_only": True,
                "role": "controller-runtime",
            }
        )
        prof.write_text(yaml.safe_dump(data))
    return prof


def build_toolkit_bundle(tmp: Path, out: Path | None = None, **kw):
    with offline_pip():
        return build(tmp, toolkit_profile(tmp, **kw), out=out)
