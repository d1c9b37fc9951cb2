"""Pack a Python package directory into one executable file (`files: source: DIR`), a zipapp.

For test stand-ins only: the kubeadm/kubelet/crictl/helm/etcdutl stand-in is a package
(tests/standin/k8s_standin/) but each tool is installed on a node as ONE file, as the real binaries
are (the lab's kubectl is Debian's real client, not this package). The file is what `python -m
zipapp` makes (a shebang line, then a zip whose `__main__.py` runs the package), written here
instead of by `zipapp.create_archive` because that takes the files' mtimes: these bytes depend only
on the files' contents (sorted names, fixed timestamps and modes), so a rebuild finds the blob
already in the bundle and writes nothing new.

`build`: small generated modules added to the package (name -> source), e.g. the Kubernetes
version a stand-in reports (`_build.py`, see build.py `_zipapp_build_modules`): same inputs,
same bytes; the package itself must not carry a file of that name.

Each module also travels compiled (`X.pyc` beside `X.py`, which zipimport tries first): a node
then runs the tool without compiling thousands of lines on every call, as a Go binary would not.
The .pyc files are checked-hash pycs (validated against their .py, so they never disagree with
it; a node whose python3 has another bytecode magic ignores them and compiles the .py). They are
compiled in a fresh `python -I -S`: marshal's output depends on the state of the process that
writes it, and the same sources must give the same bytes.
"""

from __future__ import annotations

import io
import marshal
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from appliance_cli.errors import BundleError

SHEBANG = b"#!/usr/bin/env python3\n"  # the nodes' python3 (Debian 12: 3.11)
# argv stays as the node gave it: the stand-in dispatches on basename(argv[0])
_STUB = 'import runpy\n\nrunpy.run_module("{pkg}", run_name="__main__")\n'
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest date

# The stand-in's Kubernetes tools report the version of their profile entry: an entry installed as
# one of these (install_path's basename, else its name) at version `vX.Y.Z-standin` gets
# `_build.py` with KUBERNETES_VERSION = "vX.Y.Z" (util.VERSION reads it; without it, the package's
# own default). helm and crictl keep their own versions, and get no such module; the stand-in has
# no kubectl (the lab's is Debian's real client, from_deb).
KUBERNETES_TOOLS = frozenset({"kubeadm", "kubelet"})
_STANDIN_VERSION = re.compile(r"(v\d+\.\d+\.\d+)-standin")


def is_package_dir(path: Path) -> bool:
    return path.is_dir() and (path / "__main__.py").is_file()


def pack(src: Path, label: str, build: dict[str, str] | None = None) -> bytes:
    """The zipapp of package directory `src` (its *.py files, under `<src.name>/`), plus the
    generated modules `build` (file name in the package -> its text)."""
    if not is_package_dir(src):
        raise BundleError(f"{label}: {src} is not a package directory with a __main__.py")
    members = {
        p.relative_to(src).as_posix(): p.read_bytes()
        for p in src.rglob("*.py")
        if "__pycache__" not in p.parts
    }
    for name, text in (build or {}).items():
        if name in members:
            raise BundleError(f"{label}: {src / name} exists, but the build generates it: remove it")
        members[name] = text.encode()
    members |= {f"{name}c": pyc for name, pyc in _compiled(src.name, members, label).items()}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        _add(zf, "__main__.py", _STUB.format(pkg=src.name).encode())
        for name in sorted(members):
            _add(zf, f"{src.name}/{name}", members[name])
    return SHEBANG + buf.getvalue()


# Runs in a fresh interpreter: reads {name: source} (marshal) on stdin, writes {name: pyc bytes}.
# Header: magic, flags 0b11 (hash-based, checked against the source), the source's hash.
_COMPILER = """
import importlib.util, marshal, sys
out = {}
for name, (path, source) in marshal.loads(sys.stdin.buffer.read()).items():
    code = compile(source, path, "exec", dont_inherit=True)
    out[name] = (importlib.util.MAGIC_NUMBER + (3).to_bytes(4, "little")
                 + importlib.util.source_hash(source) + marshal.dumps(code))
sys.stdout.buffer.write(marshal.dumps(out))
"""


def _compiled(pkg: str, members: dict[str, bytes], label: str) -> dict[str, bytes]:
    """{name.py: its checked-hash .pyc} for every module of the package, compiled by a fresh
    interpreter (this one's version: the lab's nodes and controller are both Python 3.11)."""
    sources = {name: (f"{pkg}/{name}", data) for name, data in members.items()}
    try:
        r = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _COMPILER],
            input=marshal.dumps(sources),
            capture_output=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BundleError(f"{label}: compiling {pkg} failed: {exc}") from None
    if r.returncode != 0:
        last = (r.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise BundleError(f"{label}: {pkg} does not compile: {last}")
    return marshal.loads(r.stdout)


def build_modules(tool: str, version: str | None) -> dict[str, str]:
    """The generated modules of the zipapp installed as `tool` from an entry at `version`."""
    m = _STANDIN_VERSION.fullmatch(version or "")
    if tool not in KUBERNETES_TOOLS or m is None:
        return {}
    return {"_build.py": f'"""Generated by the bundle builder."""\n\nKUBERNETES_VERSION = "{m.group(1)}"\n'}


def _add(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, _EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)
