"""The bundle's apt repository is signed, and this machine's real apt (Debian 12, apt 2.6, the
nodes' own) reads it only with the key the manifest carries (issue 28): the repository as the
build signs it updates; the same repository re-signed with another key is refused with apt's
own line; and the Release pins the index files apt then reads."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance_cli.bundle.aptsign import AptSigner, release_text

PACKAGES = (
    b"Package: hello-appliance\nVersion: 1.0\nArchitecture: all\nFilename: ./hello.deb\nSize: 1\nSHA256: "
    + (b"0" * 64)
    + b"\nDescription: a test entry\n\n"
)


def _repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "Packages").write_bytes(PACKAGES)
    with gzip.GzipFile(repo / "Packages.gz", "wb", mtime=0) as fh:
        fh.write(PACKAGES)
    return repo


def _apt_update(tmp: Path, repo: Path, keyring: Path) -> subprocess.CompletedProcess[str]:
    """`apt-get update` of a sources list with just this repository, in a state of its own."""
    state = tmp / "apt"
    shutil.rmtree(state, ignore_errors=True)
    for d in ("lists/partial", "cache/archives/partial", "etc/sources.list.d", "etc/preferences.d"):
        (state / d).mkdir(parents=True)
    (state / "etc/sources.list").write_text(f"deb [signed-by={keyring}] file:{repo} ./\n")
    opts = {
        "Dir::Etc::SourceList": state / "etc/sources.list",
        "Dir::Etc::SourceParts": state / "etc/sources.list.d",
        "Dir::Etc::Preferences": state / "etc/preferences",
        "Dir::Etc::PreferencesParts": state / "etc/preferences.d",
        "Dir::State": state,
        "Dir::State::Lists": state / "lists",
        "Dir::State::status": state / "status",
        "Dir::Cache": state / "cache",
        "Debug::NoLocking": "1",
        "APT::Sandbox::User": "root",
    }
    (state / "status").write_text("")
    argv = ["apt-get", "-q"] + [a for k, v in opts.items() for a in ("-o", f"{k}={v}")] + ["update"]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env={**os.environ, "LC_ALL": "C"}
    )


@pytest.fixture
def keys() -> Iterator[Path]:
    """Short: gpg-agent's socket path has at most 107 bytes (pytest's tmp_path can be longer)."""
    d = Path(tempfile.mkdtemp(prefix="aptsign-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def signed(tmp_path: Path, keys: Path) -> Iterator[tuple[AptSigner, Path, Path]]:
    signer = AptSigner(keys / "a")
    repo = _repo(tmp_path)
    signer.sign(repo, "apt-repo/test")
    keyring = tmp_path / "appliance-offline.asc"
    keyring.write_text(signer.public_key())
    yield signer, repo, keyring
    signer.close()


def test_apt_reads_the_repository_with_the_manifests_key(signed, tmp_path: Path) -> None:
    signer, repo, keyring = signed
    assert len(signer.fingerprint()) == 40
    run = _apt_update(tmp_path, repo, keyring)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "W:" not in run.stdout + run.stderr, run.stdout + run.stderr  # no unsigned/insecure warning
    lists = list((tmp_path / "apt/lists").glob("*Packages*"))
    assert lists and b"hello-appliance" in lists[0].read_bytes()


def test_apt_refuses_the_repository_re_signed_with_another_key(signed, tmp_path: Path, keys: Path) -> None:
    signer, repo, keyring = signed
    other = AptSigner(keys / "b")  # the man in the middle's key
    try:
        (repo / ".inrelease-stamp").unlink()
        other.sign(repo, "apt-repo/test")
    finally:
        other.close()
    assert other.fingerprint() != signer.fingerprint()
    run = _apt_update(tmp_path, repo, keyring)
    out = run.stdout + run.stderr
    assert "NO_PUBKEY" in out and "is not signed" in out, out
    assert not list((tmp_path / "apt/lists").glob("*Packages*")), "an index of a refused repository was kept"


def test_apt_refuses_an_index_the_release_does_not_pin(signed, tmp_path: Path) -> None:
    _, repo, keyring = signed
    (repo / "Packages").write_bytes(PACKAGES.replace(b"hello-appliance", b"evil-appliance"))
    (repo / "Packages.gz").unlink()
    run = _apt_update(tmp_path, repo, keyring)
    out = run.stdout + run.stderr
    assert run.returncode != 0 or "Hash Sum mismatch" in out or "File has unexpected size" in out, out
    lists = list((tmp_path / "apt/lists").glob("*Packages*"))
    assert not any(b"evil-appliance" in p.read_bytes() for p in lists)


def test_a_rebuild_with_nothing_new_gives_the_same_bytes(signed, tmp_path: Path) -> None:
    signer, repo, _ = signed
    before = (repo / "InRelease").read_bytes()
    signer.sign(repo, "apt-repo/test")
    assert (repo / "InRelease").read_bytes() == before
    assert (repo / "Release").read_text() == release_text(repo)
    sha = hashlib.sha256((repo / "Packages").read_bytes()).hexdigest()
    assert f" {sha} {len(PACKAGES)} Packages\n" in release_text(repo)
    (repo / "Packages").write_bytes(PACKAGES + b"\n")
    signer.sign(repo, "apt-repo/test")
    assert (repo / "InRelease").read_bytes() != before  # a changed index is signed again


def test_a_release_signed_before_gets_the_same_signature_again(signed, tmp_path: Path) -> None:
    """Two profiles' builds share a cache's repository and take it in turn (the lab bundle, then an
    older one, then the lab again): the lab's InRelease must come back byte for byte, or its
    bundle's digest moves with every build of the other."""
    signer, repo, keyring = signed
    lab = (repo / "InRelease").read_bytes()
    (repo / "Packages").write_bytes(PACKAGES + b"\n")  # the other profile's index
    signer.sign(repo, "apt-repo/test")
    other = (repo / "InRelease").read_bytes()
    assert other != lab
    (repo / "Packages").write_bytes(PACKAGES)  # the lab's again
    signer.sign(repo, "apt-repo/test")
    assert (repo / "InRelease").read_bytes() == lab
    assert (repo / "Release").read_text() == release_text(repo)
    kept = sorted(p.read_bytes() for p in repo.glob(".inrelease-*") if p.name != ".inrelease-stamp")
    assert kept == sorted([lab, other])  # dot files: the build ships none of them
    run = _apt_update(tmp_path, repo, keyring)  # and apt takes it, the signature being the key's
    assert run.returncode == 0 and "W:" not in run.stdout + run.stderr, run.stdout + run.stderr
