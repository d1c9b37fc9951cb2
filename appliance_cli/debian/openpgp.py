"""The primary-key fingerprints of a binary OpenPGP keyring (apt's /usr/share/keyrings/*.gpg), read
without gpg: `bundle lock` compares them with the fingerprints a profile pins before it lets gpgv
use the file. Only version 4 keys (a SHA-1 fingerprint over the public-key packet, RFC 4880 12.2),
which is what Debian's and Ubuntu's archive keys are; anything else is refused, not guessed at.

This is a consistency check of the file a reviewer committed. The decisive check is gpgv's own: each
Release file must carry a good signature whose primary key is one of the pinned fingerprints
(aptindex.verify_signed)."""

from __future__ import annotations

import hashlib

PUBLIC_KEY = 6  # packet tag; subkeys (14), user IDs (13) and signatures (2) are not fingerprinted here


class KeyringFormatError(ValueError):
    """Not a binary OpenPGP keyring this reader understands; the message says why."""


def _packets(data: bytes):
    """(tag, body) for each packet; RFC 4880 4.2 old- and new-format headers, no partial lengths."""
    i = 0
    while i < len(data):
        head = data[i]
        if not head & 0x80:
            raise KeyringFormatError(f"byte {i} is not an OpenPGP packet header")
        if head & 0x40:  # new format
            tag = head & 0x3F
            if i + 1 >= len(data):
                raise KeyringFormatError(f"packet at byte {i} is truncated")
            first = data[i + 1]
            if first < 192:
                length, i = first, i + 2
            elif first < 224:
                if i + 2 >= len(data):
                    raise KeyringFormatError(f"packet at byte {i} is truncated")
                length, i = ((first - 192) << 8) + data[i + 2] + 192, i + 3
            elif first == 255:
                length, i = int.from_bytes(data[i + 2 : i + 6], "big"), i + 6
            else:
                raise KeyringFormatError(f"packet at byte {i} has a partial body length (not a keyring)")
        else:  # old format
            tag, kind = (head >> 2) & 0x0F, head & 0x03
            if kind == 3:
                raise KeyringFormatError(f"packet at byte {i} has an indeterminate length (not a keyring)")
            n = 1 << kind
            length, i = int.from_bytes(data[i + 1 : i + 1 + n], "big"), i + 1 + n
        if i + length > len(data):
            raise KeyringFormatError("the keyring ends inside a packet (truncated)")
        yield tag, data[i : i + length]
        i += length


def primary_fingerprints(data: bytes) -> list[str]:
    """The fingerprint (40 upper-case hex digits) of every primary key in the keyring, in file order."""
    if data.lstrip().startswith(b"-----BEGIN"):
        raise KeyringFormatError("it is ASCII-armoured; gpgv needs a binary keyring (gpg --dearmor)")
    out = []
    for tag, body in _packets(data):
        if tag != PUBLIC_KEY:
            continue
        if not body or body[0] != 4:
            version = body[0] if body else "?"
            raise KeyringFormatError(f"it holds a version {version} key (only version 4 keys are read)")
        digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body, usedforsecurity=False)
        out.append(digest.hexdigest().upper())
    if not out:
        raise KeyringFormatError("it holds no public key")
    return out
