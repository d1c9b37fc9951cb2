"""The bundle's apt repositories, signed: a Release and its clear-signed InRelease per repository,
made with an OpenPGP key of the build (issue 28: apt read them with `[trusted=yes]` over plain
HTTP, so whoever could answer as the master's :8081 had root on every node).

The chain: the bundle's manifest is signed (Ed25519, checked by the controller and pinned on the
master); it carries each apt repository's OpenPGP key and fingerprint (AptInfo.keyring,
AptInfo.signed_by); the nodes get that key from the manifest through Ansible (never over :8081)
and apt reads the repository with `signed-by=` it alone, so apt checks InRelease, InRelease the
Packages index, and the index every .deb.

The key is made once per build cache (gpg, ed25519, no passphrase: its authority is the signed
manifest's, not its secrecy on the build host) and an InRelease is made again only when its
Release changes, so a rebuild with nothing new gives the same bytes.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from appliance_cli.errors import BundleError
from appliance_cli.fsutil import atomic_write

# What the nodes' sources line names (the role writes the manifest's key there).
KEY_UID = "appliance offline bundle apt repositories"
# A fixed date: the Release's bytes depend on the packages alone (apt only refuses a Date in the
# future; the signature's own time is in InRelease).
RELEASE_DATE = "Thu, 01 Jan 1970 00:00:00 UTC"
INDEX_FILES = ("Packages", "Packages.gz")


def _gpg(home: Path, *args: str, stdin: bytes | None = None, what: str) -> bytes:
    argv = ["gpg", "--homedir", str(home), "--batch", "--no-tty", "--quiet", *args]
    try:
        out = subprocess.run(argv, input=stdin, capture_output=True, timeout=120, check=False)
    except FileNotFoundError:
        raise BundleError(f"{what}: gpg is not installed", hint="apt-get install gnupg") from None
    if out.returncode != 0:
        last = (out.stderr.decode(errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise BundleError(f"{what}: gpg failed: {last}", hint="see `gpg --homedir " + str(home) + "`")
    return out.stdout


class AptSigner:
    def __init__(self, cache: Path):
        self.home = cache / "apt-signing" / "gnupg"
        self._fpr: str | None = None
        self._link: Path | None = None  # a short name for `home`, when its own is too long

    def fingerprint(self) -> str:
        """The key's fingerprint (40 hex digits), the key made first if the cache has none."""
        if self._fpr is None:
            self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.home, 0o700)
            # two builds on one cache at once make one key, not two
            with (self.home.parent / ".lock").open("a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                fprs = self._fingerprints()
                if not fprs:
                    _gpg(self._gnupg, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key",
                         KEY_UID, "ed25519", "sign", "never", what="the apt signing key")  # fmt: skip
                    fprs = self._fingerprints()
            if len(fprs) != 1:
                raise BundleError(
                    f"{self.home}: {len(fprs)} secret keys, expected the one apt signing key",
                    hint=f"remove {self.home.parent}; the next build makes a new key",
                )
            self._fpr = fprs[0]
        return self._fpr

    @property
    def _gnupg(self) -> Path:
        """The directory gpg is given: `home`, or a short link to it. gpg-agent's socket lives there
        unless /run/user/UID exists, and a socket path has at most 107 bytes (gpg's own error would
        be "No agent running")."""
        if len(str(self.home / "S.gpg-agent.browser")) <= 107:
            return self.home
        if self._link is None:
            self._link = Path(tempfile.mkdtemp(prefix="aptsign-", dir="/tmp")) / "g"
            self._link.symlink_to(self.home)
        return self._link

    def _fingerprints(self) -> list[str]:
        out = _gpg(self._gnupg, "--with-colons", "--list-secret-keys", what="the apt signing key").decode()
        fprs, primary = [], False
        for line in out.splitlines():
            fields = line.split(":")
            if fields[0] == "sec":
                primary = True
            elif fields[0] == "fpr" and primary:
                fprs.append(fields[9])
                primary = False
        return fprs

    def public_key(self) -> str:
        """The public key, ASCII-armored (apt >= 1.4 reads a `.asc` keyring)."""
        return _gpg(
            self._gnupg, "--armor", "--export", self.fingerprint(), what="the apt signing key"
        ).decode()

    def sign(self, repo: Path, label: str) -> None:
        """Write `Release` over the repository's index files and `InRelease`, its clear-signed copy
        (kept when the Release is unchanged and signed by this key). A Release this key signed
        before gets that signature again: a cache's repository that two profiles' builds take in
        turn keeps the same InRelease bytes for each, so neither bundle's digest moves (gpg's
        signature carries its creation time)."""
        release = release_text(repo).encode()
        fpr = self.fingerprint()
        stamp = repo / ".inrelease-stamp"
        key = f"{hashlib.sha256(release).hexdigest()} {fpr}"
        if (repo / "InRelease").is_file() and stamp.is_file() and stamp.read_text() == key:
            return
        atomic_write(repo / "Release", release)
        kept = repo / f".inrelease-{hashlib.sha256(key.encode()).hexdigest()[:32]}"  # a dot: not shipped
        if kept.is_file():
            signed = kept.read_bytes()
        else:
            signed = _gpg(self._gnupg, "--pinentry-mode", "loopback", "--passphrase", "", "--local-user", fpr,
                          "--digest-algo", "SHA512", "--clearsign", stdin=release, what=f"{label}: InRelease")  # fmt: skip
            atomic_write(kept, signed)
        atomic_write(repo / "InRelease", signed)
        atomic_write(stamp, key)

    def close(self) -> None:
        """Stop the gpg-agent the key's use started (it would outlive the build)."""
        if self.home.is_dir():
            subprocess.run(["gpgconf", "--homedir", str(self._gnupg), "--kill", "gpg-agent"],
                           capture_output=True, timeout=30, check=False)  # fmt: skip
        if self._link is not None:
            shutil.rmtree(self._link.parent, ignore_errors=True)  # the link only, not the key
            self._link = None


def release_text(repo: Path) -> str:
    lines = ["Origin: appliance", "Label: appliance offline bundle", f"Date: {RELEASE_DATE}", "SHA256:"]
    for name in INDEX_FILES:
        data = (repo / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    return "\n".join(lines) + "\n"
