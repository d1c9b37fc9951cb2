"""appliance_cli.debian.openpgp: the primary-key fingerprints of a binary keyring, read without gpg,
agree with gpg's own listing; what is not a binary keyring of version 4 keys is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from appliance_cli.debian.openpgp import KeyringFormatError, primary_fingerprints
from tests._support.paths import ROOT

GPG = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
needs_gpg = pytest.mark.skipif(not shutil.which("gpg"), reason="needs gpg (apt-get install gpg)")


def _gpg_primaries(home: Path, ring: Path) -> list[str]:
    out = subprocess.run(
        [*GPG, "--show-keys", "--with-colons", str(ring)],
        env={**os.environ, "GNUPGHOME": str(home)},
        check=True,
        capture_output=True,
    ).stdout.decode()
    primaries, after_pub = [], False
    for line in out.splitlines():  # pub:, maybe rvk: (a designated revoker), then the key's own fpr:
        if line.startswith("pub:"):
            after_pub = True
        elif line.startswith("fpr:") and after_pub:
            primaries.append(line.split(":")[9])
            after_pub = False
    return primaries


@needs_gpg
@pytest.mark.parametrize("ring", sorted((ROOT / "bundles" / "keyrings").glob("*.gpg")), ids=lambda p: p.name)
def test_committed_keyrings_read_as_gpg_lists_them(ring: Path, tmp_path: Path) -> None:
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    assert primary_fingerprints(ring.read_bytes()) == _gpg_primaries(home, ring)


@needs_gpg
def test_a_generated_key_with_a_subkey(tmp_path: Path) -> None:
    """Subkeys (which sign Debian's Release files) are not primaries; the primary is what is pinned."""
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    subprocess.run(
        [*GPG, "--quick-gen-key", "K <k@example.invalid>", "rsa2048", "cert", "never"], env=env, check=True
    )
    fpr = _gpg_primaries(home, _export(home, tmp_path))[0]
    subprocess.run([*GPG, "--quick-add-key", fpr, "ed25519", "sign", "never"], env=env, check=True)
    ring = _export(home, tmp_path)
    assert primary_fingerprints(ring.read_bytes()) == [fpr] == _gpg_primaries(home, ring)
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False)


def _export(home: Path, tmp_path: Path) -> Path:
    ring = tmp_path / "ring.gpg"
    ring.write_bytes(
        subprocess.run([*GPG, "--export"], env={**os.environ, "GNUPGHOME": str(home)}, check=True,
                       capture_output=True).stdout
    )  # fmt: skip
    return ring


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nxx\n", "ASCII-armoured"),
        (b"", "holds no public key"),
        (b"not a keyring", "not an OpenPGP packet header"),
        (bytes([0x99, 0x00, 0x10, 0x04]), "truncated"),  # old-format public key, 16 bytes promised
        (bytes([0xC6, 0x02, 0x05, 0x00]), "version 5 key"),  # new-format public key, version 5
    ],
)
def test_what_is_not_a_v4_binary_keyring_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(KeyringFormatError, match=why):
        primary_fingerprints(data)
