"""The Ed25519 verifier install-toolkit.sh carries for a machine whose openssl cannot verify
Ed25519 (OpenSSL 1.1.1, Ubuntu 20.04's: no `pkeyutl -rawin`): RFC 8032's verification in pure
Python, run by the system's python3. Checked against RFC 8032's own test vectors and against
`cryptography` (OpenSSL) on random keys, messages and damaged signatures. The script around it:
tests/integration/test_install_toolkit_script.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance_cli.bundle.toolkit_script import TEMPLATE

Verify = Callable[[bytes, bytes, bytes], bool]
L = 2**252 + 27742317777372353535851937790883648493

# RFC 8032, section 7.1: TEST 1, 2, 3 (secret key, public key, message, signature)
RFC8032 = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
]


def verifier_source() -> str:
    text = TEMPLATE.read_text()
    return text.split("<<'ED25519'\n", 1)[1].split("\nED25519\n", 1)[0] + "\n"


@pytest.fixture(scope="module")
def verify() -> Verify:
    ns: dict = {"__name__": "install_toolkit_ed25519"}  # not __main__: no argv handling
    exec(compile(verifier_source(), "install-toolkit.sh:ed25519", "exec"), ns)
    return ns["verify"]


def _raw(pub: Ed25519PublicKey) -> bytes:
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _openssl_says(pub: bytes, msg: bytes, sig: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(pub).verify(sig, msg)
    except (InvalidSignature, ValueError):
        return False
    return True


@pytest.mark.parametrize(("secret", "public", "message", "signature"), RFC8032)
def test_rfc8032_vectors(verify: Verify, secret: str, public: str, message: str, signature: str) -> None:
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(secret))
    pub, msg, sig = bytes.fromhex(public), bytes.fromhex(message), bytes.fromhex(signature)
    assert _raw(key.public_key()) == pub and key.sign(msg) == sig  # the vectors as printed
    assert verify(pub, msg, sig)
    assert not verify(pub, msg + b"x", sig)
    assert not verify(pub, msg, sig[:63] + bytes([sig[63] ^ 1]))


@settings(max_examples=60, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), msg=st.binary(max_size=300), flip=st.integers(0, 64 * 8 - 1))
def test_agrees_with_openssl(verify: Verify, seed: bytes, msg: bytes, flip: int) -> None:
    key = Ed25519PrivateKey.from_private_bytes(seed)
    pub, sig = _raw(key.public_key()), key.sign(msg)
    assert verify(pub, msg, sig)
    bad = bytearray(sig)
    bad[flip // 8] ^= 1 << (flip % 8)
    assert verify(pub, msg, bytes(bad)) is _openssl_says(pub, msg, bytes(bad)) is False
    if msg:
        assert not verify(pub, bytes([msg[0] ^ 1]) + msg[1:], sig)
    other = _raw(Ed25519PrivateKey.generate().public_key())
    assert not verify(other, msg, sig)


def test_refuses_what_openssl_refuses(verify: Verify) -> None:
    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    pub, msg = _raw(key.public_key()), b"manifest"
    sig = key.sign(msg)
    # S + L: the same point equation, a non-canonical S (RFC 8032 5.1.7 step 1: S < L)
    s_plus_l = sig[:32] + (int.from_bytes(sig[32:], "little") + L).to_bytes(32, "little")
    assert not _openssl_says(pub, msg, s_plus_l) and not verify(pub, msg, s_plus_l)
    assert not verify(pub, msg, sig[:63]) and not verify(pub, msg, sig + b"\0")
    assert not verify(pub[:31], msg, sig)
    # y >= p, and a y with no x on the curve (y = 2): neither is a point
    not_canonical = (2**255 - 19 + 1).to_bytes(32, "little")
    assert not verify(not_canonical, msg, sig) and not verify(pub, msg, not_canonical + sig[32:])
    assert not verify((2).to_bytes(32, "little"), msg, sig)


@pytest.mark.parametrize("good", [True, False])
def test_runs_as_the_script_runs_it(verify: Verify, tmp_path: Path, good: bool) -> None:
    """`python3 -I - KEY MESSAGE SIGNATURE` with the program on stdin: exit 0 valid, 1 not."""
    key = Ed25519PrivateKey.generate()
    msg = b'{"schema": "appliance-bundle"}\n' * 1000
    (tmp_path / "key").write_bytes(_raw(key.public_key()))
    (tmp_path / "msg").write_bytes(msg if good else msg + b" ")
    (tmp_path / "sig").write_bytes(key.sign(msg))
    argv = [sys.executable, "-I", "-", *(str(tmp_path / n) for n in ("key", "msg", "sig"))]
    r = subprocess.run(argv, input=verifier_source(), capture_output=True, text=True, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0 if good else 1, "", "")
