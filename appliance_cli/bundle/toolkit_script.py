"""install-toolkit.sh: the script at a bundle's root that installs the toolkit offline on site.

The template (install-toolkit.sh next to this module, shipped in the wheel) gets a data block
listing what the script needs (the controller runtime, if any, and every wheel: file name,
sha256, size, blobs), taken from the artifacts the build just wrote. The script itself then
needs neither a JSON parser nor Python to find its files."""

from __future__ import annotations

import re
from pathlib import Path

from appliance_cli.bundle.model import CONTROLLER_RUNTIME, Artifact, FileEntry, hex_of
from appliance_cli.errors import BundleError

TEMPLATE = Path(__file__).with_name("install-toolkit.sh")
PLACEHOLDER = "# @@BUNDLE-DATA@@\n"
TOOLKIT_DIST = "appliance_toolkit"  # the project's wheel: appliance_toolkit-<version>-....whl
PIP_DIST = "pip"
PYTHON_MIN = "3.11"  # requires-python of the toolkit (pyproject.toml); ansible-core 2.18+ needs it
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_CP_ABI = re.compile(r"cp(\d)(\d+)[dmu]*")


def _sh_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def wheel_python(names: list[str]) -> str | None:
    """The X.Y a set of wheels is tied to (a cpXY ABI tag), or None when all are pure or abi3."""
    versions = set()
    for name in names:
        parts = name[: -len(".whl")].split("-")
        for abi in parts[-2].split(".") if len(parts) >= 5 else []:
            if m := _CP_ABI.fullmatch(abi):
                versions.add(f"{m[1]}.{m[2]}")
    if len(versions) > 1:
        raise BundleError(
            f"the bundle's wheels are built for several Pythons ({', '.join(sorted(versions))})"
        )
    return versions.pop() if versions else None


def _fits(version: str, exact: str | None) -> bool:
    xy = tuple(int(x) for x in version.split(".")[:2])
    if exact:
        return xy == tuple(int(x) for x in exact.split("."))
    return xy >= tuple(int(x) for x in PYTHON_MIN.split("."))


def _line(kind: str, f: FileEntry, label: str) -> str:
    if not _SAFE_NAME.fullmatch(f.path):
        raise BundleError(f"{label}: file name {f.path!r} is not safe for install-toolkit.sh")
    blobs = " ".join(hex_of(d) for d, _ in f.blobs())
    return f"{kind} {f.path} {hex_of(f.digest)} {f.size} {blobs}"


def render(artifacts: list[Artifact]) -> bytes | None:
    """The script for these artifacts, or None when they hold no toolkit wheel (no script then)."""
    wheels = [a for a in artifacts if a.kind == "wheel"]
    toolkit = next((a for a in wheels if a.name.replace("-", "_").lower() == TOOLKIT_DIST), None)
    if toolkit is None:
        return None
    pip = next((a for a in wheels if a.name.lower() == PIP_DIST), None)
    if pip is None:
        raise BundleError(
            "the bundle carries the toolkit's wheel but not pip's: install-toolkit.sh installs with it",
            hint='add {name: pip, requirements: ["pip==<pinned version>"]} to the profile\'s wheels',
        )
    runtimes = [a for a in artifacts if a.role == CONTROLLER_RUNTIME]
    if len(runtimes) > 1:
        raise BundleError("more than one artifact has role controller-runtime")
    exact = wheel_python([f.path for a in wheels for f in a.files])
    lines = []
    runtime_name = ""
    for rt in runtimes:
        if rt.kind != "file" or len(rt.files) != 1:
            raise BundleError(f"{rt.label}: a controller runtime is one file (a .tar.gz)")
        (f,) = rt.files
        if not f.path.endswith((".tar.gz", ".tgz")):
            raise BundleError(f"{rt.label}: {f.path} is not a .tar.gz (an install_only CPython build)")
        if not rt.version or not re.fullmatch(r"\d+\.\d+(\.[0-9A-Za-z]+)*", rt.version):
            raise BundleError(f"{rt.label}: give its Python version (version: 3.11.x) in the profile")
        if not _fits(rt.version, exact):
            need = exact or f"{PYTHON_MIN}+"
            raise BundleError(
                f"{rt.label}: Python {rt.version} cannot run the bundle's wheels (built for {need})",
                hint="build the bundle with the controller runtime's Python version",
            )
        runtime_name = f.path
        lines.append(_line("runtime", f, rt.label))
    for a in wheels:
        lines += [_line("wheel", f, a.label) for f in a.files]
    data = "\n".join(
        [
            "# --- written by `appliance bundle build`: the same entries as manifest.json ---",
            f"TOOLKIT_VERSION={_sh_quote(toolkit.version or '')}",
            f"TOOLKIT_WHEEL={_sh_quote(toolkit.files[0].path)}",
            f"PIP_WHEEL={_sh_quote(pip.files[0].path)}",
            f"PYTHON_MIN={_sh_quote(PYTHON_MIN)}",
            f"PYTHON_EXACT={_sh_quote(exact or '')}  # set when a wheel is tied to one CPython (cpXY ABI)",
            f"RUNTIME={_sh_quote(runtime_name)}  # the controller runtime's file name, if the bundle has one",
            "# KIND FILE-NAME SHA256 SIZE BLOB...",
            "bundle_files() {",
            "\tcat <<'EOF'",
            *lines,
            "EOF",
            "}",
            "# --- end of the data block ---",
            "",
        ]
    )
    template = TEMPLATE.read_text()
    if template.count(PLACEHOLDER) != 1:
        raise BundleError(f"{TEMPLATE}: the data placeholder is missing (damaged installation?)")
    return template.replace(PLACEHOLDER, data).encode()
