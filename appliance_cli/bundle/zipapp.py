"""Pack a Python package directory into one executable file (`files: source: DIR`), a zipapp.

For test stand-ins only: the kubeadm/kubelet/kubectl/crictl stand-in is a package
(tests/standin/k8s_standin/) but each tool is installed on a node as ONE file, as the real binaries
are. The file is what `python -m zipapp` makes (a shebang line, then a zip whose `__main__.py`
runs the package), written here instead of by `zipapp.create_archive` because that takes the
files' mtimes: these bytes depend only on the files' contents (sorted names, fixed timestamps and
modes), so a rebuild finds the blob already in the bundle and writes nothing new.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from appliance_cli.errors import BundleError

SHEBANG = b"#!/usr/bin/env python3\n"  # the nodes' python3 (Debian 12: 3.11)
# argv stays as the node gave it: the stand-in dispatches on basename(argv[0])
_STUB = 'import runpy\n\nrunpy.run_module("{pkg}", run_name="__main__")\n'
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest date


def is_package_dir(path: Path) -> bool:
    return path.is_dir() and (path / "__main__.py").is_file()


def pack(src: Path, label: str) -> bytes:
    """The zipapp of package directory `src` (its *.py files, under `<src.name>/`)."""
    if not is_package_dir(src):
        raise BundleError(f"{label}: {src} is not a package directory with a __main__.py")
    files = sorted(p for p in src.rglob("*.py") if "__pycache__" not in p.parts)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        _add(zf, "__main__.py", _STUB.format(pkg=src.name).encode())
        for p in files:
            _add(zf, f"{src.name}/{p.relative_to(src).as_posix()}", p.read_bytes())
    return SHEBANG + buf.getvalue()


def _add(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, _EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)
