"""age keys as the operator hands them to `appliance`: the recipient a backup is encrypted to
(site config `backup.recipient`) and the identity file `appliance restore --identity` reads.

The formats are age's (age-encryption.org/v1, "X25519 recipient and identity"): Bech32, HRP
"age" for the recipient, "AGE-SECRET-KEY-" (upper case) for the identity, 32 bytes of key in
58 data characters with the checksum. An identity file is what `age-keygen -o FILE` writes:
'#' comment lines, blank lines and one key per line. Checked here by shape only; age itself
checks the checksum and says whether the key opens a backup."""

from __future__ import annotations

import re
from pathlib import Path

from appliance_cli.errors import UsageError

# Bech32's 32 data characters: the alphabet without 1, b, i, o.
_BECH32 = "[02-9ac-hj-np-z]"
RECIPIENT = re.compile(rf"age1{_BECH32}{{58}}")
IDENTITY = re.compile(rf"AGE-SECRET-KEY-1{_BECH32.upper()}{{58}}")
HINT = (
    "make a key pair off the appliance: `age-keygen -o backup-identity.txt` prints the public key "
    "(age1...) for backup.recipient; keep the file itself away from the appliance"
)


def recipient_problem(value: str) -> str | None:
    return None if RECIPIENT.fullmatch(value) else "is not an age recipient (age1 and 58 more characters)"


def check_identity_file(path: Path, flag: str = "--identity") -> Path:
    """The identity file, when it holds at least one age X25519 identity and nothing but keys and
    comments; else a one-line UsageError naming the file (never its content)."""
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise UsageError(f"{flag} {path}: no such file", hint=HINT) from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not an ASCII text file"
        raise UsageError(f"{flag} {path}: cannot read it ({why})", hint=HINT) from None
    lines = [ln.strip() for ln in text.splitlines()]
    keys = [ln for ln in lines if ln and not ln.startswith("#")]
    if not keys or not all(IDENTITY.fullmatch(k) for k in keys):
        raise UsageError(
            f"{flag} {path}: not an age identity file (one AGE-SECRET-KEY-1... line, as age-keygen writes)",
            hint=HINT,
        )
    return path
