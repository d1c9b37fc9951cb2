"""`bundle lock` reads an apt archive only through a Release file signed by a key the profile pins.

The archive is served over HTTP on 127.0.0.1 and reached through the --mirror map, as upstream
would be; its InRelease is signed here with throwaway keys (gpg in a temporary GNUPGHOME). The
keyring a profile names must hash to its pinned sha256 and hold exactly its pinned fingerprints.
Every refusal is one line naming the entry, the suite's URL and the file, exit code 4.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import lzma
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from appliance_cli.bundle import lock as lock_mod
from appliance_cli.bundle.lock import LockOptions, lock_profile
from appliance_cli.bundle.lockfile import AptLock, DebLock, Lock, load_lock, lock_path, write_lock
from appliance_cli.bundle.mirrors import MirrorMap
from appliance_cli.bundle.pins import pin_problems
from appliance_cli.bundle.profile import load_profile
from appliance_cli.cli.main import main
from appliance_cli.errors import BundleError

pytestmark = pytest.mark.skipif(
    not (shutil.which("gpg") and shutil.which("gpgv")), reason="needs gpg and gpgv (apt-get install gpg gpgv)"
)

ARCHIVE = "http://archive.ubuntu.com/ubuntu"
INRELEASE = f"{ARCHIVE}/dists/focal/InRelease"
GPG = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]


class Keys:
    """Two throwaway signing keys: `archive` (the one the profile pins) and `other`."""

    def __init__(self, home: Path):
        self.env = {**os.environ, "GNUPGHOME": str(home)}
        self.fpr: dict[str, str] = {}
        for who in ("archive", "other"):
            uid = f"Test {who} key <{who}@example.invalid>"
            self._gpg("--quick-gen-key", uid, "ed25519", "sign", "never")
            colons = self._gpg("--with-colons", "--fingerprint", uid).decode()
            self.fpr[who] = next(ln.split(":")[9] for ln in colons.splitlines() if ln.startswith("fpr:"))

    def _gpg(self, *args: str, data: bytes | None = None) -> bytes:
        return subprocess.run([*GPG, *args], input=data, env=self.env, check=True, capture_output=True).stdout

    def export(self, who: str) -> bytes:
        return self._gpg("--export", self.fpr[who])

    def clearsign(self, who: str, data: bytes, *opts: str) -> bytes:
        return self._gpg("--local-user", self.fpr[who], *opts, "--clearsign", "-o", "-", data=data)

    def detach_sign(self, who: str, data: bytes) -> bytes:
        return self._gpg("--local-user", self.fpr[who], "--detach-sign", "-o", "-", data=data)

    def stop(self) -> None:
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=self.env, check=False, capture_output=True)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    k = Keys(home)
    yield k
    k.stop()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        return None


@pytest.fixture
def served(tmp_path: Path):
    """The directory served as upstream hosts (HOST/PATH), and the --mirror map that reaches it."""
    root = tmp_path / "upstream"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    mirrors = MirrorMap.parse(
        [f"archive.ubuntu.com=http://127.0.0.1:{httpd.server_address[1]}/archive"], env=False
    )
    yield root / "archive" / "ubuntu", mirrors  # http://archive.ubuntu.com/ubuntu/P
    httpd.shutdown()


def release_text(suite: str = "focal", extra: str = "") -> tuple[bytes, dict[str, bytes]]:
    """A one-package suite: its Release text and the files under the archive root it lists."""
    deb = b"containerd-test 1.6\n"
    pool = "pool/main/c/containerd-test/containerd-test_1.6_amd64.deb"
    stanza = (
        "Package: containerd-test\nVersion: 1.6\nArchitecture: amd64\nPriority: optional\n"
        f"Filename: {pool}\nSize: {len(deb)}\nSHA256: {hashlib.sha256(deb).hexdigest()}\n"
    )
    packages = lzma.compress(stanza.encode())
    name = "main/binary-amd64/Packages.xz"
    text = (
        f"Origin: Ubuntu\nLabel: Ubuntu\nSuite: {suite}\nCodename: {suite}\n{extra}Architectures: amd64\n"
        f"Components: main\nSHA256:\n {hashlib.sha256(packages).hexdigest()} {len(packages)} {name}\n"
    )
    return text.encode(), {f"dists/{suite}/{name}": packages, pool: deb}


def publish(archive: Path, inrelease: bytes | None, files: dict[str, bytes], **more: bytes) -> None:
    """Write the suite: InRelease (unless None), the listed files, and Release/Release.gpg if given."""
    for rel, data in files.items():
        (archive / rel).parent.mkdir(parents=True, exist_ok=True)
        (archive / rel).write_bytes(data)
    dist = archive / "dists/focal"
    dist.mkdir(parents=True, exist_ok=True)
    if inrelease is not None:
        (dist / "InRelease").write_bytes(inrelease)
    for name, data in more.items():
        (dist / name.replace("_", ".")).write_bytes(data)


def write_profile(
    tmp_path: Path, keyring: bytes | None, pinned: list[str], *, sha256: str | None = None
) -> Path:
    """A production profile with one apt entry; its keyring at keys/archive.gpg under tmp_path
    (the repository root the lock resolves keyring paths against)."""
    entry: dict = {
        "name": "focal",
        "distro": "ubuntu",
        "codename": "focal",
        "sources": f"deb {ARCHIVE} focal main\n",
        "packages": ["containerd-test"],
    }
    if keyring is not None:
        ring = tmp_path / "keys" / "archive.gpg"
        ring.parent.mkdir(exist_ok=True)
        ring.write_bytes(keyring)
        entry["keyring"] = {
            "path": "keys/archive.gpg",
            "sha256": sha256 or hashlib.sha256(keyring).hexdigest(),
            "fingerprints": pinned,
        }
    path = tmp_path / "profiles" / "prod-apt.yml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({"name": "prod-apt", "production": True, "apt": [entry]}, sort_keys=False))
    return path


def lock(profile: Path, mirrors: MirrorMap, tmp_path: Path, **kw):
    return lock_profile(LockOptions(profile, mirrors, cache=tmp_path / "cache", repo_root=tmp_path, **kw))


def refused(profile: Path, mirrors: MirrorMap, tmp_path: Path) -> str:
    with pytest.raises(BundleError) as err:
        lock(profile, mirrors, tmp_path)
    assert err.value.exit_code == 4 and "\n" not in err.value.message
    assert not lock_path(profile).exists(), "nothing is locked when a Release file is refused"
    return err.value.message


# --- the four cases ----------------------------------------------------------------------------


def test_inrelease_signed_by_the_pinned_key_is_locked(keys, served, tmp_path: Path) -> None:
    archive, mirrors = served
    text, files = release_text()
    publish(archive, keys.clearsign("archive", text), files)
    profile = write_profile(tmp_path, keys.export("archive"), [keys.fpr["archive"]])

    res = lock(profile, mirrors, tmp_path)
    assert res.written and res.resolved == ["apt/focal"]
    entry = load_lock(res.path, "prod-apt").apt["focal"]  # type: ignore[union-attr]
    assert [(d.name, d.version, d.suite) for d in entry.debs] == [("containerd-test", "1.6", "focal")]
    assert entry.verified_with == [keys.fpr["archive"]]


def test_unsigned_inrelease_is_refused_for_a_production_profile(keys, served, tmp_path: Path) -> None:
    archive, mirrors = served
    text, files = release_text()
    publish(archive, text, files)  # what a man in the middle serves: the same text, no signature
    profile = write_profile(tmp_path, keys.export("archive"), [keys.fpr["archive"]])
    assert refused(profile, mirrors, tmp_path) == (
        f"apt/focal: InRelease of {ARCHIVE} focal ({INRELEASE}): not signed "
        "(it is not an OpenPGP clear-signed message)"
    )

    # no InRelease at all, and a Release without Release.gpg: refused too, naming the Release
    (archive / "dists/focal/InRelease").unlink()
    publish(archive, None, files, Release=text)
    assert refused(profile, mirrors, tmp_path) == (
        f"apt/focal: Release of {ARCHIVE} focal ({ARCHIVE}/dists/focal/Release): "
        "not signed (no InRelease, no Release.gpg)"
    )


def test_a_production_profile_without_a_keyring_is_refused(served, tmp_path: Path) -> None:
    _, mirrors = served
    profile = write_profile(tmp_path, None, [])
    with pytest.raises(BundleError) as err:
        lock(profile, mirrors, tmp_path)
    assert err.value.exit_code == 4 and "\n" not in err.value.message
    assert err.value.message == (
        f"profile {profile}: Value error, apt/focal: a production profile checks its archive's "
        "signatures: give its keyring (path, sha256, fingerprints; bundles/README.md)"
    )


def test_inrelease_signed_by_another_key_is_refused(keys, served, tmp_path: Path) -> None:
    archive, mirrors = served
    text, files = release_text()
    publish(archive, keys.clearsign("other", text), files)
    profile = write_profile(tmp_path, keys.export("archive"), [keys.fpr["archive"]])
    msg = refused(profile, mirrors, tmp_path)
    assert msg.startswith(
        f"apt/focal: InRelease of {ARCHIVE} focal ({INRELEASE}): no good signature by a trusted key (signed by "
    )
    assert msg.endswith(f"(not in the keyring); pinned: {keys.fpr['archive']})")

    # a keyring holding both keys does not help the other one: only pinned keys count
    both = keys.export("archive") + keys.export("other")
    profile = write_profile(tmp_path, both, [keys.fpr["archive"], keys.fpr["other"]])
    assert lock(profile, mirrors, tmp_path).written  # pinned, so it counts
    lock_path(profile).unlink()
    (archive / "dists/focal/InRelease").write_bytes(keys.clearsign("other", text))
    profile = write_profile(tmp_path, keys.export("archive"), [keys.fpr["archive"]])
    assert "no good signature by a trusted key" in refused(profile, mirrors, tmp_path)


def test_a_keyring_whose_fingerprint_differs_from_the_pinned_one_is_refused(
    keys, served, tmp_path: Path
) -> None:
    archive, mirrors = served
    text, files = release_text()
    publish(archive, keys.clearsign("other", text), files)
    # the keyring holds the other key, sha256 pinned to that very file: its fingerprint is what differs
    profile = write_profile(tmp_path, keys.export("other"), [keys.fpr["archive"]])
    assert refused(profile, mirrors, tmp_path) == (
        f"apt/focal: keyring keys/archive.gpg holds key {keys.fpr['other']}, which the profile does not "
        f"pin and lacks pinned key {keys.fpr['archive']}"
    )


# --- around them -----------------------------------------------------------------------------


def test_a_keyring_file_that_differs_from_its_pinned_sha256_is_refused(keys, served, tmp_path: Path) -> None:
    archive, mirrors = served
    text, files = release_text()
    publish(archive, keys.clearsign("archive", text), files)
    ring = keys.export("archive")
    profile = write_profile(tmp_path, ring, [keys.fpr["archive"]], sha256="0" * 64)
    assert refused(profile, mirrors, tmp_path) == (
        f"apt/focal: keyring keys/archive.gpg has sha256 {hashlib.sha256(ring).hexdigest()}, "
        f"the profile pins {'0' * 64}"
    )


def test_a_signed_release_and_its_detached_signature(keys, served, tmp_path: Path) -> None:
    archive, mirrors = served
    text, files = release_text()
    publish(archive, None, files, Release=text, Release_gpg=keys.detach_sign("other", text))
    profile = write_profile(tmp_path, keys.export("archive"), [keys.fpr["archive"]])
    assert f"({ARCHIVE}/dists/focal/Release.gpg): no good signature by a trusted key" in refused(
        profile, mirrors, tmp_path
    )
    publish(archive, None, files, Release_gpg=keys.detach_sign("archive", text))
    assert lock(profile, mirrors, tmp_path).written


def test_signed_text_cannot_be_extended(keys, served, tmp_path: Path) -> None:
    """What gpgv checks is all that is read: a second clear-signed message (by any key) after the
    archive's, or text after its signature, is refused; so is a Packages line edited after signing."""
    archive, mirrors = served
    text, files = release_text()
    good = keys.clearsign("archive", text)
    profile = write_profile(tmp_path, keys.export("archive"), [keys.fpr["archive"]])
    evil = text.replace(b"SHA256:\n", b"SHA256:\n " + b"f" * 64 + b" 1 main/binary-amd64/Packages\n")
    for served_text, why in (
        (good + keys.clearsign("other", evil), "not one signed message"),
        (good + b"\n" + evil, "text follows its signature"),
        (good.replace(b"Codename: focal", b"Codename: jammy"), "BAD signature by key"),
    ):
        publish(archive, served_text, files)
        msg = refused(profile, mirrors, tmp_path)
        assert msg.startswith(f"apt/focal: InRelease of {ARCHIVE} focal ({INRELEASE}): {why}"), msg


def test_a_signature_over_sha1_is_refused(keys, served, tmp_path: Path) -> None:
    """gpgv 2.2 calls a SHA-1 signature good; apt does not (SHA-1 collisions can be bought)."""
    archive, mirrors = served
    text, files = release_text()
    publish(archive, keys.clearsign("archive", text, "--digest-algo", "SHA1"), files)
    profile = write_profile(tmp_path, keys.export("archive"), [keys.fpr["archive"]])
    assert refused(profile, mirrors, tmp_path) == (
        f"apt/focal: InRelease of {ARCHIVE} focal ({INRELEASE}): no good signature by a trusted key "
        f"(signed by {keys.fpr['archive']} (over SHA1, a weak digest); pinned: {keys.fpr['archive']})"
    )


def test_a_signed_release_of_another_suite_or_an_expired_one_is_refused(keys, served, tmp_path: Path) -> None:
    archive, mirrors = served
    profile = write_profile(tmp_path, keys.export("archive"), [keys.fpr["archive"]])
    text, files = release_text(suite="focal-security")  # validly signed, but not focal's
    publish(archive, keys.clearsign("archive", text), files)
    assert refused(profile, mirrors, tmp_path) == (
        f"apt/focal: InRelease of {ARCHIVE} focal ({INRELEASE}) is signed for suite focal-security "
        "(codename focal-security), not focal"
    )
    text, files = release_text(extra="Valid-Until: Sat, 01 Jan 2000 00:00:00 UTC\n")
    publish(archive, keys.clearsign("archive", text), files)
    assert refused(profile, mirrors, tmp_path) == (
        f"apt/focal: InRelease of {ARCHIVE} focal ({INRELEASE}) expired on Sat, 01 Jan 2000 00:00:00 UTC "
        "(Valid-Until)"
    )


def test_the_cli_exits_4_with_one_line(keys, served, tmp_path: Path, monkeypatch, capsys) -> None:
    archive, mirrors = served
    text, files = release_text()
    publish(archive, keys.clearsign("other", text), files)
    profile = write_profile(tmp_path, keys.export("archive"), [keys.fpr["archive"]])
    monkeypatch.setattr(lock_mod, "content_root", lambda: tmp_path)  # keyring paths: this tmp "repository"
    monkeypatch.delenv("APPLIANCE_BUNDLE_MIRRORS", raising=False)
    (spec,) = mirrors.entries
    argv = ["bundle", "lock", "--profile", str(profile), "--mirror", "=".join(spec)]
    argv += ["--cache", str(tmp_path / "cache")]
    assert main(argv) == 4
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "no good signature" in ln)
    assert f"apt/focal: InRelease of {ARCHIVE} focal ({INRELEASE})" in line
    assert not lock_path(profile).exists()


def test_a_lock_made_without_checking_signatures_is_not_built_nor_kept(keys, served, tmp_path: Path) -> None:
    """An apt entry locked before its profile pinned keys (or with other keys) is stale: `bundle
    build` refuses it, and `bundle lock` resolves it again instead of keeping it."""
    archive, mirrors = served
    text, files = release_text()
    publish(archive, keys.clearsign("archive", text), files)
    profile = write_profile(tmp_path, keys.export("archive"), [keys.fpr["archive"]])
    prof = load_profile(profile)
    deb = DebLock(
        name="evil", version="1", arch="amd64", filename="pool/evil.deb", sha256="e" * 64, size=1,
        base=ARCHIVE, suite="focal", component="main",
    )  # fmt: skip
    unchecked = AptLock(
        sources=f"deb {ARCHIVE} focal main\n", arch="amd64", packages=["containerd-test"], debs=[deb]
    )
    write_lock(lock_path(profile), Lock(profile="prod-apt", apt={"focal": unchecked}))
    assert pin_problems(prof, load_lock(lock_path(profile), "prod-apt")) == [
        "apt/focal: locked without checking its archive's signatures; the profile pins keys for it; "
        "run `appliance bundle lock --profile prod-apt --update focal` and review the lock diff"
    ]
    res = lock(profile, mirrors, tmp_path)
    assert res.resolved == ["apt/focal"] and not res.kept
    entry = load_lock(lock_path(profile), "prod-apt").apt["focal"]  # type: ignore[union-attr]
    assert [d.name for d in entry.debs] == ["containerd-test"]
    assert pin_problems(prof, load_lock(lock_path(profile), "prod-apt")) == []
