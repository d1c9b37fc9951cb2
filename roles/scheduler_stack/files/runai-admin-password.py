#!/usr/bin/env python3
"""Write a new Run:ai admin password to PATH (created 0600, never printed): 24 characters from
the operating system's CSPRNG (`secrets`), with upper and lower case letters and digits, as
Run:ai's password rules want. Refuses to overwrite an existing file."""

import os
import secrets
import string
import sys

ALPHABET = string.ascii_letters + string.digits


def generate() -> str:
    while True:
        pw = "".join(secrets.choice(ALPHABET) for _ in range(24))
        if any(c.islower() for c in pw) and any(c.isupper() for c in pw) and any(c.isdigit() for c in pw):
            return pw


def main(path: str) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(generate())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
