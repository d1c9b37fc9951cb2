"""The pure-Python apt resolver against synthetic archives: Packages and Release text written
here, served from a dict through the `fetch` the caller supplies."""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from appliance_cli.debian.aptindex import AptResolveError, IndexFile, parse_sources
from appliance_cli.debian.aptresolve import (
    LockedDeb,
    download_locked,
    installed_from_dpkg_status,
    resolve_closure,
)
from appliance_cli.errors import ApplianceError

BASE = "http://archive.example/ubuntu"


def stanza(name: str, version: str = "1.0", **fields: str) -> str:
    fields.setdefault("Architecture", "amd64")
    fields.setdefault("Priority", "optional")
    fname = f"pool/main/{name[0]}/{name}/{name}_{version}_{fields['Architecture']}.deb"
    body = f"{name} {version}".encode()
    lines = [f"Package: {name}", f"Version: {version}"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in fields.items()]
    lines += [f"Filename: {fname}", f"Size: {len(body)}", f"SHA256: {hashlib.sha256(body).hexdigest()}"]
    return "\n".join(lines) + "\n"


def release(files: dict[str, bytes], suite: str) -> bytes:
    sums = "".join(f" {hashlib.sha256(d).hexdigest()} {len(d)} {n}\n" for n, d in sorted(files.items()))
    return f"Origin: Test\nSuite: {suite}\nArchitectures: amd64\nComponents: main\nSHA256:\n{sums}".encode()


def archive(suites: dict[str, list[str]], comp: str = "main", compress: str = ".xz") -> dict[str, bytes]:
    """url -> bytes of a tiny archive: per suite an InRelease (unsigned) and one Packages file."""
    out: dict[str, bytes] = {}
    for suite, stanzas in suites.items():
        text = "\n".join(stanzas).encode()
        data = lzma.compress(text) if compress == ".xz" else text
        name = f"{comp}/binary-amd64/Packages{compress}"
        out[f"{BASE}/dists/{suite}/{name}"] = data
        out[f"{BASE}/dists/{suite}/InRelease"] = release({name: data}, suite)
        for s in stanzas:
            pkg = dict(line.split(": ", 1) for line in s.splitlines())
            out[f"{BASE}/{pkg['Filename']}"] = f"{pkg['Package']} {pkg['Version']}".encode()
    return out


def served(files: dict[str, bytes]):
    def fetch(url: str) -> bytes:
        if url not in files:
            raise OSError(f"HTTP Error 404: Not Found: {url}")
        return files[url]

    return fetch


BASE_SYSTEM = [
    stanza("libc6", "2.31", Depends="libgcc-s1"),
    stanza("libgcc-s1", "10.0"),  # optional, but the base has it: libc6 depends on it
    stanza("bash", "5.0", Essential="yes", Priority="required", Pre_Depends="libc6 (>= 2.28)"),
    stanza("mawk", "1.3", Priority="required", Provides="awk"),
    stanza("init", "1", Priority="required", Depends="usrmerge | usr-is-merged"),
    stanza("usrmerge", "37", Provides="usr-is-merged"),
]


def resolve(stanzas: list[str], packages: list[str], **kw) -> list[LockedDeb]:
    files = archive({"focal": BASE_SYSTEM + stanzas})
    return resolve_closure(f"deb {BASE} focal main\n", packages, "amd64", served(files), **kw)


def names(debs: list[LockedDeb]) -> list[str]:
    return [d.name for d in debs]


def test_closure_follows_depends_and_pre_depends_sorted_with_lock_fields() -> None:
    stanzas = [stanza("runc", "1.1", Depends="libseccomp2 (>= 2.4), libc6"), stanza("libseccomp2", "2.5")]
    stanzas += [
        stanza("containerd", "1.6", Pre_Depends="zz-init", Depends="runc (>= 1.0)"),
        stanza("zz-init"),
    ]
    debs = resolve(
        stanzas,
        ["containerd"],
    )
    assert names(debs) == ["containerd", "libseccomp2", "runc", "zz-init"]
    runc = debs[2]
    assert (runc.version, runc.arch, runc.base, runc.suite, runc.component) == (
        "1.1",
        "amd64",
        BASE,
        "focal",
        "main",
    )
    assert runc.filename == "pool/main/r/runc/runc_1.1_amd64.deb"
    assert runc.sha256 == hashlib.sha256(b"runc 1.1").hexdigest() and runc.size == len(b"runc 1.1")


def test_base_system_skipped_essential_required_and_their_dependencies() -> None:
    debs = resolve([stanza("tool", Depends="bash, libc6 (>= 2.30), libgcc-s1, awk")], ["tool"])
    assert names(debs) == ["tool"]


def test_a_choice_in_the_base_system_is_not_assumed_made() -> None:
    """`init` needs `usrmerge | usr-is-merged`; which one a node has is unknown, so neither counts."""
    assert names(resolve([stanza("tool", Depends="usrmerge")], ["tool"])) == ["tool", "usrmerge"]


def test_a_package_asked_for_by_name_is_locked_even_when_in_the_base() -> None:
    assert names(resolve([], ["bash"])) == ["bash"]


def test_explicit_installed_set_replaces_the_rule_and_old_versions_are_upgraded() -> None:
    tool = stanza("tool", Depends="libc6 (>= 2.31), bash")
    debs = resolve([tool], ["tool"], assume_installed={"libc6": "2.27", "bash": "5.0", "libgcc-s1": "10.0"})
    assert names(debs) == ["libc6", "tool"]  # the node's 2.27 is too old: 2.31 is locked
    debs = resolve([tool], ["tool"], assume_installed=["bash"], extra_installed=["libc6"])
    assert names(debs) == ["tool"]  # bare names: taken to fit


def test_dpkg_status_gives_the_installed_versions() -> None:
    status = (
        "Package: libc6\nStatus: install ok installed\nVersion: 2.31-0ubuntu9\n\n"
        "Package: old\nStatus: deinstall ok config-files\nVersion: 1\n"
    )
    assert installed_from_dpkg_status(status) == {"libc6": "2.31-0ubuntu9"}


def test_alternatives_first_satisfiable_and_already_met_first() -> None:
    pkgs = [stanza("b"), stanza("c"), stanza("a-old", "1.0")]
    assert names(resolve([*pkgs, stanza("top", Depends="missing | b | c")], ["top"])) == ["b", "top"]
    assert names(resolve([*pkgs, stanza("top", Depends="a-old (>= 2) | c")], ["top"])) == ["c", "top"]
    # `b | c` is left until the plain dependencies are in: c comes anyway, so b is not added
    assert names(resolve([*pkgs, stanza("top", Depends="b | c, c")], ["top"])) == ["c", "top"]
    # an alternative the base system meets needs nothing
    assert names(resolve([*pkgs, stanza("top", Depends="b | bash")], ["top"])) == ["top"]


def test_virtual_packages_through_provides() -> None:
    mta = [
        stanza("postfix", Provides="mail-transport-agent", Priority="optional"),
        stanza("exim4", Provides="mail-transport-agent", Priority="standard"),
        stanza("zmta", Provides="mail-transport-agent (= 2.0)"),
    ]
    # the provider of higher Priority wins, then the name
    assert names(resolve([*mta, stanza("top", Depends="mail-transport-agent")], ["top"])) == ["exim4", "top"]
    # a versioned dependency is met by a versioned Provides only
    debs = resolve([*mta, stanza("top", Depends="mail-transport-agent (>= 2)")], ["top"])
    assert names(debs) == ["top", "zmta"]
    # what the base provides (mawk: awk) meets it
    assert names(resolve([stanza("top", Depends="awk")], ["top"])) == ["top"]
    # asked for by name: one provider is taken, several must be chosen by the caller
    assert names(resolve([stanza("only", Provides="virt")], ["virt"])) == ["only"]
    with pytest.raises(
        AptResolveError, match=r"'mail-transport-agent' is virtual, provided by exim4, postfix, zmta"
    ):
        resolve(mta, ["mail-transport-agent"])


def test_arch_qualifiers_and_arch_all() -> None:
    py = stanza("python3", "3.8", Multi_Arch="allowed")
    doc = stanza("docs", Architecture="all")
    debs = resolve([py, doc, stanza("top", Depends="python3:any (>= 3.6), docs:native")], ["top"])
    assert names(debs) == ["docs", "python3", "top"]
    assert debs[0].arch == "all"
    with pytest.raises(AptResolveError, match=r"top -> Depends 'plain:any'.*Multi-Arch: no"):
        resolve([stanza("plain"), stanza("top", Depends="plain:any")], ["top"])
    other = stanza("armonly", Architecture="arm64")  # not installable on amd64: not a candidate
    with pytest.raises(AptResolveError, match=r"no package 'armonly'"):
        resolve([other], ["armonly"])


def test_highest_version_across_suites_wins() -> None:
    files = archive({"focal": [stanza("runc", "1.0")], "focal-updates": [stanza("runc", "1.1~rc1")]})
    files.update(archive({"focal-security": [stanza("runc", "1.0-1ubuntu1")]}))
    sources = f"deb {BASE} focal main\ndeb {BASE} focal-updates main\ndeb {BASE} focal-security main\n"
    (runc,) = resolve_closure(sources, ["runc"], "amd64", served(files))
    assert (runc.version, runc.suite) == ("1.1~rc1", "focal-updates")
    # the same version in two suites: the first source line wins
    files = archive({"focal": [stanza("x", "2")], "focal-updates": [stanza("x", "2")]})
    (x,) = resolve_closure(
        f"deb {BASE} focal-updates main\ndeb {BASE} focal main\n", ["x"], "amd64", served(files)
    )
    assert x.suite == "focal-updates"


def test_missing_package_is_one_line_naming_it() -> None:
    with pytest.raises(AptResolveError) as err:
        resolve([], ["linux-headers-generic"])
    assert err.value.message == "no package 'linux-headers-generic' in focal main for amd64"
    assert "\n" not in err.value.message and err.value.hint and isinstance(err.value, ApplianceError)


def test_unsatisfiable_dependency_names_the_chain() -> None:
    chain = [stanza("top", Depends="mid"), stanza("mid", Depends="leaf (>= 3) | ghost"), stanza("leaf", "2")]
    with pytest.raises(AptResolveError) as err:
        resolve(chain, ["top"])
    assert err.value.message == (
        "cannot resolve top -> mid -> Depends 'leaf (>= 3) | ghost': the candidate is leaf 2 "
        "(amd64, Multi-Arch: no); no package or provider named ghost in focal main"
    )


def test_release_and_packages_sha_mismatch_names_the_suite() -> None:
    files = archive({"focal": BASE_SYSTEM})
    url = f"{BASE}/dists/focal/main/binary-amd64/Packages.xz"
    files[url] = lzma.compress(b"Package: evil\n")
    with pytest.raises(
        AptResolveError,
        match=r"^Packages file of focal main \(.*Packages.xz\) has sha256 .* but InRelease says",
    ):
        resolve_closure(f"deb {BASE} focal main", ["bash"], "amd64", served(files))


def test_release_fallback_gz_and_indexes_recorded() -> None:
    files = archive({"focal": BASE_SYSTEM}, compress="")
    files[f"{BASE}/dists/focal/Release"] = files.pop(f"{BASE}/dists/focal/InRelease")
    seen: list[IndexFile] = []
    resolve_closure(f"deb {BASE} focal main", ["bash"], "amd64", served(files), indexes_out=seen)
    (index,) = seen
    assert index.url.endswith("/dists/focal/main/binary-amd64/Packages") and index.release_url.endswith(
        "/Release"
    )
    assert not index.signed and index.sha256 == hashlib.sha256(files[index.url]).hexdigest()


def test_component_missing_from_release() -> None:
    files = archive({"focal": BASE_SYSTEM})
    with pytest.raises(AptResolveError, match=r"lists no universe/binary-amd64/Packages"):
        resolve_closure(f"deb {BASE} focal main universe", ["bash"], "amd64", served(files))


def test_unreachable_suite_is_one_line() -> None:
    with pytest.raises(AptResolveError, match=r"^cannot fetch the Release file of .* focal .*404"):
        resolve_closure(f"deb {BASE} focal main", ["bash"], "amd64", served({}))


def test_sources_lines() -> None:
    text = f"# comment\ndeb-src {BASE} focal main\ndeb [arch=amd64 signed-by=/k.gpg] {BASE}/ focal main universe\n"
    (src,) = parse_sources(text + "deb http://flat.example/repo ./\n")[:1]
    assert (src.base, src.suite, src.components) == (BASE, "focal", ("main", "universe"))
    flat = parse_sources("deb http://flat.example/repo ./\n")[0]
    assert flat.flat and flat.dist_url("InRelease") == "http://flat.example/repo/InRelease"
    for bad in ("deb http://x focal", "rpm http://x focal main", "Types: deb\nURIs: http://x", ""):
        with pytest.raises(AptResolveError):
            parse_sources(bad)


# --- download_locked -------------------------------------------------------------------------


def locked_set() -> tuple[list[LockedDeb], dict[str, bytes]]:
    files = archive(
        {"focal": [*BASE_SYSTEM, stanza("runc", "1.1", Depends="libseccomp2"), stanza("libseccomp2")]}
    )
    return resolve_closure(f"deb {BASE} focal main", ["runc"], "amd64", served(files)), files


def test_download_writes_checked_files_and_skips_what_is_there(tmp_path: Path) -> None:
    debs, files = locked_set()
    calls: list[str] = []

    def fetch_to(url: str, dest: Path) -> None:
        calls.append(url)
        dest.write_bytes(files[url])

    paths = download_locked(debs, tmp_path, fetch_to)
    assert [p.name for p in paths] == ["libseccomp2_1.0_amd64.deb", "runc_1.1_amd64.deb"]
    assert paths[1].read_bytes() == b"runc 1.1" and len(calls) == 2
    assert download_locked(debs, tmp_path, fetch_to) == paths and len(calls) == 2
    assert sorted(os.listdir(tmp_path)) == [p.name for p in paths]


def test_download_mismatch_names_the_package_and_both_sums(tmp_path: Path) -> None:
    debs, files = locked_set()
    runc = debs[1]
    files[runc.url] = b"tampered"
    (tmp_path / "runc_1.1_amd64.deb").write_bytes(b"stale")  # not the locked sha: fetched again

    def fetch_to(url: str, dest: Path) -> None:
        dest.write_bytes(files[url])

    with pytest.raises(AptResolveError) as err:
        download_locked(debs, tmp_path, fetch_to)
    actual = hashlib.sha256(b"tampered").hexdigest()
    assert err.value.message == (
        f"runc 1.1: {runc.url} has sha256 {actual} (8 bytes); the index says {runc.sha256} ({runc.size} bytes)"
    )
    assert not list(tmp_path.glob("*.part"))
    assert (tmp_path / "runc_1.1_amd64.deb").read_bytes() == b"stale"


def test_download_fetch_failure_is_one_line(tmp_path: Path) -> None:
    debs, _ = locked_set()

    def fetch_to(url: str, dest: Path) -> None:
        dest.write_bytes(b"half")
        raise ConnectionResetError("connection reset by peer")

    with pytest.raises(
        AptResolveError, match=r"^cannot fetch libseccomp2 1.0 \(.*\): connection reset by peer$"
    ):
        download_locked(debs, tmp_path, fetch_to)
    assert list(tmp_path.iterdir()) == []


# --- signatures (gpgv against a key generated here) -------------------------------------------


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory):
    if not (shutil.which("gpg") and shutil.which("gpgv")):
        pytest.skip("gpg/gpgv not installed")
    home = tmp_path_factory.mktemp("gnupg")
    env = {**os.environ, "GNUPGHOME": str(home)}
    gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run(
        [*gpg, "--quick-gen-key", "Test Archive <t@example>", "ed25519", "sign", "never"], env=env, check=True
    )
    keyring = home / "archive.gpg"
    keyring.write_bytes(subprocess.run([*gpg, "--export"], env=env, check=True, capture_output=True).stdout)

    def sign(data: bytes, detached: bool = False) -> bytes:
        args = ["--detach-sign"] if detached else ["--clearsign"]
        return subprocess.run(
            [*gpg, *args, "-o", "-"], input=data, env=env, check=True, capture_output=True
        ).stdout

    return keyring, sign


def test_signed_inrelease_is_verified(signer) -> None:
    keyring, sign = signer
    files = archive({"focal": BASE_SYSTEM})
    url = f"{BASE}/dists/focal/InRelease"
    files[url] = sign(files[url])
    seen: list[IndexFile] = []
    debs = resolve_closure(
        f"deb {BASE} focal main", ["bash"], "amd64", served(files), keyring=keyring, indexes_out=seen
    )
    assert names(debs) == ["bash"] and seen[0].signed
    files[url] = files[url].replace(b"Origin: Test", b"Origin: Evil")
    with pytest.raises(
        AptResolveError,
        match=r"^InRelease of .* focal \(\S+/dists/focal/InRelease\): BAD signature by key ",
    ):
        resolve_closure(f"deb {BASE} focal main", ["bash"], "amd64", served(files), keyring=keyring)


def test_release_gpg_is_verified_and_unsigned_refused(signer, tmp_path: Path) -> None:
    keyring, sign = signer
    files = archive({"focal": BASE_SYSTEM})
    rel = files.pop(f"{BASE}/dists/focal/InRelease")
    files[f"{BASE}/dists/focal/Release"] = rel
    with pytest.raises(
        AptResolveError, match=r"/focal/Release\): not signed \(no InRelease, no Release.gpg\)"
    ):
        resolve_closure(f"deb {BASE} focal main", ["bash"], "amd64", served(files), keyring=keyring)
    files[f"{BASE}/dists/focal/Release.gpg"] = sign(rel, detached=True)
    assert names(
        resolve_closure(f"deb {BASE} focal main", ["bash"], "amd64", served(files), keyring=keyring)
    ) == ["bash"]
    other = tmp_path / "other.gpg"
    other.write_bytes(b"")
    with pytest.raises(AptResolveError, match=r"Release.gpg\): no good signature by a trusted key"):
        resolve_closure(f"deb {BASE} focal main", ["bash"], "amd64", served(files), keyring=other)


def test_a_pinned_version_is_taken_over_the_highest() -> None:
    """`name=version` (apt-get's syntax), as the OLD lab bundle pins containerd to bookworm-security's
    older build; its dependencies are resolved from the pinned version's own Depends."""
    files = archive(
        {
            "bookworm": [
                stanza("containerd", "1.6.20~ds1-1+deb12u3", Depends="runc (>= 1.1)"),
                stanza("runc", "1.1.5"),
            ],
            "bookworm-security": [
                stanza("containerd", "1.6.20~ds1-1+deb12u2", Depends="tini"),
                stanza("tini"),
            ],
        }
    )
    sources = f"deb {BASE} bookworm main\ndeb {BASE} bookworm-security main\n"
    newest = resolve_closure(sources, ["containerd"], "amd64", served(files))
    assert [(d.name, d.version) for d in newest] == [
        ("containerd", "1.6.20~ds1-1+deb12u3"),
        ("runc", "1.1.5"),
    ]
    pinned = resolve_closure(sources, ["containerd=1.6.20~ds1-1+deb12u2"], "amd64", served(files))
    assert [(d.name, d.version, d.suite) for d in pinned] == [
        ("containerd", "1.6.20~ds1-1+deb12u2", "bookworm-security"),
        ("tini", "1.0", "bookworm-security"),
    ]


def test_a_pin_the_index_lacks_is_one_line_naming_the_package_and_its_versions() -> None:
    files = archive({"focal": [stanza("containerd", "1.6.2"), stanza("containerd", "1.5.9")]})
    with pytest.raises(AptResolveError) as err:
        resolve_closure(f"deb {BASE} focal main\n", ["containerd=1.7.0"], "amd64", served(files))
    assert err.value.message == (
        "package containerd=1.7.0: no such version in the index (it has: 1.5.9, 1.6.2)"
    )
    assert "\n" not in err.value.message and err.value.hint
    with pytest.raises(
        AptResolveError, match=r"^package ghost=1: no such version in the index \(it has: none\)$"
    ):
        resolve_closure(f"deb {BASE} focal main\n", ["ghost=1"], "amd64", served(files))
