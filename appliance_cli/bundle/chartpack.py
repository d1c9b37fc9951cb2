"""Pack a Helm chart directory into a chart archive (`charts: source: DIR`), as `helm package` does.

For test charts only (a chart shaped like an upstream one whose archive could not be obtained):
production bundles carry the upstream archive, pinned by the digest its helm repository
publishes. The archive holds the chart under `<name>/` (the name from Chart.yaml, as helm
requires) and its bytes depend only on the files' contents: sorted names, fixed owner, mode and
timestamps, gzip without a name or time. So a rebuild writes no new blob.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import yaml

from appliance_cli.errors import BundleError


def is_chart_dir(path: Path) -> bool:
    return path.is_dir() and (path / "Chart.yaml").is_file()


def chart_name(src: Path, label: str) -> tuple[str, str]:
    """(name, version) from the directory's Chart.yaml."""
    try:
        meta = yaml.safe_load((src / "Chart.yaml").read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise BundleError(f"{label}: {src}/Chart.yaml cannot be read: {exc}") from None
    if not isinstance(meta, dict) or not meta.get("name") or not meta.get("version"):
        raise BundleError(f"{label}: {src}/Chart.yaml needs a name and a version")
    return str(meta["name"]), str(meta["version"])


def pack(src: Path, label: str) -> bytes:
    """The .tgz of chart directory `src`: every file under `<name>/`, in name order."""
    if not is_chart_dir(src):
        raise BundleError(f"{label}: {src} is not a chart directory with a Chart.yaml")
    name, _ = chart_name(src, label)
    files = sorted(p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in files:
            data = p.read_bytes()
            info = tarfile.TarInfo(f"{name}/{p.relative_to(src).as_posix()}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()
