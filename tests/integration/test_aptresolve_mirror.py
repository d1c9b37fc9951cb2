"""The pure-Python apt resolver against real archives.

1. Offline: a tiny apt mirror built here with dpkg-deb, dpkg-scanpackages and apt-ftparchive
   (InRelease signed with a key made here when gpg is installed), served over HTTP on 127.0.0.1:
   resolve, download, then a corrupted .deb in the mirror is named by the download.
2. Online: Debian bookworm's real index standing in for Ubuntu focal's (no Ubuntu mirror is
   reachable from the build machines): the production profile's apt package list is resolved
   (no download), with the Ubuntu-only names mapped to their Debian equivalents, each suite's
   InRelease checked against the lab profile's pinned Debian 12 archive keys. Skipped, saying so,
   only when deb.debian.org cannot be reached.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from appliance_cli.bundle.lock import archive_keys
from appliance_cli.bundle.profile import load_profile
from appliance_cli.debian.aptindex import AptResolveError, IndexFile, http_fetch, http_fetch_to
from appliance_cli.debian.aptresolve import download_locked, resolve_closure
from tests._support.aptmirror import TOOLS, build_deb, index_suite

REPO = Path(__file__).resolve().parents[2]


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *a) -> None:
        return None


@pytest.fixture(scope="module")
def keyring(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]] | None:
    if not (shutil.which("gpg") and shutil.which("gpgv")):
        return None
    home = tmp_path_factory.mktemp("gnupg")
    env = {**os.environ, "GNUPGHOME": str(home)}
    gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run(
        [*gpg, "--quick-gen-key", "Mirror <m@example>", "ed25519", "sign", "never"], env=env, check=True
    )
    ring = home / "mirror.gpg"
    ring.write_bytes(subprocess.run([*gpg, "--export"], env=env, check=True, capture_output=True).stdout)
    return ring, env


@pytest.fixture
def mirror(tmp_path: Path, keyring):
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt-get install dpkg-dev apt-utils xz-utils)")
    root = tmp_path / "mirror"
    main, updates = root / "pool/test", root / "pool/test-updates"
    build_deb(main, "base-files", "1", Essential="yes", Priority="required")
    build_deb(main, "libc-test", "2.0", Priority="required")
    build_deb(main, "libfoo1", "1.0", Depends="libc-test (>= 2.0)")
    build_deb(updates, "libfoo1", "1.2", Depends="libc-test (>= 2.0)")
    build_deb(main, "mailer", "3.0", Provides="mail-agent")
    build_deb(main, "helper", "0.5", Depends="libfoo1 (>= 1.1)")
    build_deb(
        main, "app", "1.0", Pre_Depends="base-files", Depends="helper, missing-tool | mail-agent, libc-test"
    )
    for suite in ("test", "test-updates"):
        index_suite(root, suite, keyring[1] if keyring else None)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield root, f"deb {url} test main\ndeb {url} test-updates main\n"
    httpd.shutdown()


def test_tiny_mirror_resolve_download_and_corruption(mirror, keyring, tmp_path: Path) -> None:
    root, sources = mirror
    seen: list[IndexFile] = []
    ring = keyring[0] if keyring else None
    debs = resolve_closure(sources, ["app"], "amd64", http_fetch, keyring=ring, indexes_out=seen)
    assert [(d.name, d.version, d.suite) for d in debs] == [
        ("app", "1.0", "test"),
        ("helper", "0.5", "test"),
        ("libfoo1", "1.2", "test-updates"),  # helper needs >= 1.1: only the update has it
        ("mailer", "3.0", "test"),  # missing-tool | mail-agent: the provider
    ]
    assert all(i.url.endswith("Packages.xz") and i.signed == (ring is not None) for i in seen)
    dest = tmp_path / "debs"
    paths = download_locked(debs, dest, http_fetch_to)
    assert [p.name for p in paths] == [Path(d.filename).name for d in debs]
    for deb, path in zip(debs, paths, strict=True):
        assert hashlib.sha256(path.read_bytes()).hexdigest() == deb.sha256
        info = subprocess.run(
            ["dpkg-deb", "-f", str(path), "Package", "Version"], check=True, capture_output=True
        )
        assert info.stdout.decode().split() == ["Package:", deb.name, "Version:", deb.version]

    bad = root / debs[1].filename  # helper
    bad.write_bytes(bad.read_bytes()[:-10] + b"0123456789")
    (dest / bad.name).unlink()
    with pytest.raises(AptResolveError) as err:
        download_locked(debs, dest, http_fetch_to)
    msg = err.value.message
    assert msg.startswith("helper 0.5: http://127.0.0.1:") and f"the index says {debs[1].sha256}" in msg
    assert hashlib.sha256(bad.read_bytes()).hexdigest() in msg and "\n" not in msg
    assert not (dest / bad.name).exists() and not list(dest.glob("*.part"))


def test_tiny_mirror_packages_edited_after_release(mirror) -> None:
    root, sources = mirror
    packages = root / "dists/test-updates/main/binary-amd64/Packages.xz"
    packages.write_bytes(packages.read_bytes() + b"\0")
    with pytest.raises(
        AptResolveError, match=r"^Packages file of test-updates main .* but (In)?Release says"
    ):
        resolve_closure(sources, ["app"], "amd64", http_fetch)


# --- the production list against Debian's real index ----------------------------------------

DEBIAN = """\
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
"""
# Ubuntu names with no package of that name in Debian -> the Debian package that fills the role.
UBUNTU_TO_DEBIAN = {"linux-headers-generic": "linux-headers-amd64"}


def _debian_reachable() -> str | None:
    try:
        urllib.request.urlopen("http://deb.debian.org/debian/dists/bookworm/InRelease", timeout=10).close()
    except OSError as exc:
        return f"deb.debian.org is unreachable from here ({exc})"
    return None


def test_production_package_list_on_debian_bookworm() -> None:
    """Debian bookworm stands in for Ubuntu focal: resolution only, no .deb downloaded."""
    unreachable = _debian_reachable()
    if unreachable:
        pytest.skip(unreachable)
    profile = yaml.safe_load((REPO / "bundles/profiles/appliance-k8s1.23.yml").read_text())
    wanted = profile["apt"][0]["packages"]
    mapped = {n: UBUNTU_TO_DEBIAN[n] for n in wanted if n in UBUNTU_TO_DEBIAN}
    packages = [mapped.get(n, n) for n in wanted]
    # the lab profile's pinned Debian 12 archive keys: its keyring file, checked against its pins
    lab = load_profile("lab").apt[0]
    ring = archive_keys(lab, REPO, f"apt/{lab.name}", production=True) if shutil.which("gpgv") else None
    seen: list[IndexFile] = []
    start = time.monotonic()
    debs = resolve_closure(DEBIAN, packages, "amd64", http_fetch, keyring=ring, indexes_out=seen)
    took = time.monotonic() - start
    by_name = {d.name: d for d in debs}
    print(
        f"\nbookworm closure of the production list: {len(debs)} packages, "
        f"{sum(d.size for d in debs) / 1e6:.1f} MB, resolved in {took:.1f} s; "
        f"mapped {mapped}; signatures {'checked' if ring else 'NOT checked (no keyring)'}"
    )
    assert set(packages) <= set(by_name)  # everything asked for is locked
    # pulled in, not asked for: skopeo's containers-common, nfs-common's libnfsidmap1, the headers
    assert {"golang-github-containers-common", "libnfsidmap1", "linux-kbuild-6.1"} <= set(by_name)
    assert any(n.startswith("linux-headers-6.1.") and n.endswith("-amd64") for n in by_name)
    assert by_name["linux-headers-amd64"].suite in ("bookworm", "bookworm-security")
    for base in (
        "libc6",
        "bash",
        "coreutils",
        "dpkg",
        "libgcc-s1",
        "libseccomp2",
    ):  # the base system is not locked
        assert base not in by_name
    assert [d.name for d in debs] == sorted(by_name)
    for d in debs:
        assert (
            d.filename.startswith(("pool/main/", "pool/updates/main/")) and len(d.sha256) == 64 and d.size > 0
        )
        assert d.base in ("http://deb.debian.org/debian", "http://deb.debian.org/debian-security")
    assert len(seen) == 3 and all(i.signed == (ring is not None) for i in seen)
    assert 80 < len(debs) < 400, "a closure this size suggests the base system rule went wrong"
