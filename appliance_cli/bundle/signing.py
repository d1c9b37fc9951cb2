"""Ed25519 keys and the detached signature over the exact bytes of manifest.json.

manifest.sig is JSON: {format, algorithm, key_id, manifest_digest, signature(base64)}. key_id is
the sha256 of the raw public key, so a wrong key is told apart from a tampered manifest."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from appliance_cli.bundle.model import (
    MANIFEST,
    SIGNATURE,
    check_digest,
    load_manifest,
    read_metadata,
    sha256_digest,
    write_if_changed,
)
from appliance_cli.errors import BundleError
from appliance_cli.fsutil import read_regular

SIG_FORMAT = "appliance-bundle-signature/v1"
WRONG_KEY = "wrong key"  # the problem that means the bundle may be fine, the trusted key is not its signer
KEY_LIMIT = 1024**2  # an Ed25519 PEM is a few hundred bytes


def key_id(pub: Ed25519PublicKey) -> str:
    raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def keygen(prefix: Path, force: bool = False) -> tuple[Path, Path, str]:
    """Write PREFIX.key (PKCS#8 PEM, mode 0600, created that way: never world-readable even briefly)
    and PREFIX.pub. Returns (private, public, key_id). The key is never printed."""
    priv_path, pub_path = Path(f"{prefix}.key"), Path(f"{prefix}.pub")
    for p in (priv_path, pub_path):
        if p.exists() and not force:
            raise BundleError(f"{p} already exists", hint="choose another --out prefix or pass --force")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pub_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        priv_path.parent.mkdir(parents=True, exist_ok=True)
        priv_path.unlink(missing_ok=True)
        fd = os.open(priv_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "wb") as f:
            f.write(pem)
        os.chmod(priv_path, 0o600)  # umask cannot widen it, but be explicit
        pub_path.write_bytes(pub_pem)
    except OSError as exc:
        raise BundleError(f"cannot write key files at {prefix}: {exc.strerror}") from None
    return priv_path, pub_path, key_id(key.public_key())


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        data = read_regular(path, KEY_LIMIT)
    except OSError as exc:
        raise BundleError(f"{path}: cannot read private key: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise BundleError(f"{path}: not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BundleError(f"{path}: not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        data = read_regular(path, KEY_LIMIT)
    except OSError as exc:
        raise BundleError(f"{path}: cannot read public key: {exc.strerror}") from None
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        raise BundleError(
            f"{path}: not a PEM public key (did you pass the .key instead of the .pub?)"
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise BundleError(f"{path}: not an Ed25519 public key")
    return key


def sign_bundle(root: Path, key_path: Path) -> str:
    """Sign manifest.json as it is on disk. Returns the key id."""
    key = load_private_key(key_path)
    _, raw = load_manifest(root)  # refuses to sign something that is not a valid manifest
    sig = {
        "format": SIG_FORMAT,
        "algorithm": "ed25519",
        "key_id": key_id(key.public_key()),
        "manifest_digest": sha256_digest(raw),
        "signature": base64.b64encode(key.sign(raw)).decode(),
    }
    # ed25519 is deterministic: re-signing an unchanged manifest with the same key writes nothing
    write_if_changed(root / SIGNATURE, (json.dumps(sig, indent=1) + "\n").encode())
    return sig["key_id"]


@dataclass
class SignatureStatus:
    present: bool
    checked: bool = False
    valid: bool = False
    key_id: str | None = None
    problem: str | None = None


def check_signature(root: Path, raw_manifest: bytes, pub: Ed25519PublicKey | None) -> SignatureStatus:
    path = root / SIGNATURE
    if not path.exists():
        if pub is None:
            return SignatureStatus(present=False)
        return SignatureStatus(
            present=False, checked=True, problem=f"{SIGNATURE} missing: the bundle is unsigned"
        )
    try:
        sig = json.loads(read_metadata(path))
        signature = base64.b64decode(sig["signature"], validate=True)
        signer = check_digest(sig["key_id"])  # printed below: a key id, never the file's free text
    except OSError as exc:  # not a regular file (a FIFO, /dev/zero), too big, unreadable
        problem = f"{SIGNATURE} is unreadable: {exc.strerror or exc}"
        return SignatureStatus(present=True, checked=pub is not None, problem=problem)
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: nested too deep
        return SignatureStatus(present=True, checked=pub is not None, problem=f"{SIGNATURE} is malformed")
    if pub is None:
        return SignatureStatus(present=True, key_id=signer)
    want = key_id(pub)
    if signer != want:
        return SignatureStatus(
            present=True,
            checked=True,
            key_id=signer,
            problem=f"{WRONG_KEY}: {SIGNATURE} was made by key {signer[:19]}…, not by the given {want[:19]}…",
        )
    try:
        pub.verify(signature, raw_manifest)
    except InvalidSignature:
        return SignatureStatus(
            present=True,
            checked=True,
            key_id=signer,
            problem=f"{MANIFEST} does not match {SIGNATURE}: the manifest was changed after signing",
        )
    return SignatureStatus(present=True, checked=True, valid=True, key_id=signer)
