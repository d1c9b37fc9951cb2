"""A tiny real apt archive on disk: .debs built with dpkg-deb, indexed with dpkg-scanpackages and
apt-ftparchive (Packages, .xz, .gz, Release; InRelease when a gpg home is given). Served by
whatever HTTP server the test runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

TOOLS = ("dpkg-deb", "dpkg-scanpackages", "apt-ftparchive", "xz", "gzip")


def build_deb(pool: Path, name: str, version: str, **fields: str) -> None:
    pkg = pool.parent / "src" / f"{name}_{version}"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "usr/share/doc" / name).mkdir(parents=True)
    (pkg / "usr/share/doc" / name / "README").write_text(f"{name} {version}\n")
    control = {"Package": name, "Version": version, "Architecture": "amd64", "Maintainer": "t <t@example>"}
    control |= {k.replace("_", "-"): v for k, v in fields.items()}
    control["Description"] = f"test package {name}"
    (pkg / "DEBIAN/control").write_text("".join(f"{k}: {v}\n" for k, v in control.items()))
    pool.mkdir(parents=True, exist_ok=True)
    out = pool / f"{name}_{version}_{control['Architecture']}.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(pkg), str(out)],
        check=True,
        capture_output=True,
    )


def index_suite(root: Path, suite: str, sign_with: dict[str, str] | None) -> None:
    dist = root / "dists" / suite
    binary = dist / "main/binary-amd64"
    binary.mkdir(parents=True)
    packages = subprocess.run(
        ["dpkg-scanpackages", "--arch", "amd64", f"pool/{suite}", "/dev/null"],
        cwd=root, check=True, capture_output=True,
    ).stdout  # fmt: skip
    (binary / "Packages").write_bytes(packages)
    subprocess.run(["xz", "-k", str(binary / "Packages")], check=True)
    subprocess.run(["gzip", "-k", "-n", str(binary / "Packages")], check=True)
    conf = [f"-oAPT::FTPArchive::Release::{k}={v}" for k, v in
            {"Suite": suite, "Codename": suite, "Architectures": "amd64", "Components": "main"}.items()]  # fmt: skip
    release = subprocess.run(
        ["apt-ftparchive", *conf, "release", str(dist)], check=True, capture_output=True
    ).stdout
    (dist / "Release").write_bytes(release)
    if sign_with is not None:
        gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
        subprocess.run(
            [*gpg, "--clearsign", "-o", str(dist / "InRelease"), str(dist / "Release")],
            env=sign_with,
            check=True,
        )
