"""Unit tests reach no other machine. A test that forgets to stub the SSH or socket layer fails
here at once, naming where it tried to go, instead of opening a connection: the example
inventory's 192.168.10.x addresses are a real site's."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
from collections.abc import Iterator
from typing import Any

import pytest

_SHIM = """#!/bin/sh
# ssh's destination is its first argument that is neither an option nor an option's value.
real="@REAL@"  # the real tool, filled in below
dest=""; skip=0
for a in "$@"; do
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  case "$a" in
    -[bcDEeFIiJLlmOopQRSWw]) skip=1 ;;
    -*) ;;
    *) dest="${a##*@}"; break ;;
  esac
done
case "$dest" in
  127.*|localhost|::1) exec "$real" "$@" ;;
esac
echo "unit tests open no SSH connection but to loopback: $(basename "$real") $*" >&2
exit 255
"""


def _local(address: Any) -> bool:
    """Loopback and unix sockets only (a test's own servers listen on 127.0.0.1)."""
    if not isinstance(address, tuple):
        return True  # AF_UNIX path
    try:
        return ipaddress.ip_address(address[0]).is_loopback
    except ValueError:
        return address[0] == "localhost"


@pytest.fixture(scope="session")
def _ssh_shims(tmp_path_factory: pytest.TempPathFactory) -> str:
    shims = tmp_path_factory.mktemp("no-ssh")
    for tool in ("ssh", "scp", "sftp"):
        real = shutil.which(tool) or f"/usr/bin/{tool}"
        (shims / tool).write_text(_SHIM.replace("@REAL@", real))
        (shims / tool).chmod(0o755)
    return str(shims)


# Per test, not per session: a session fixture would stay in force over the integration tests
# that run after these in the same pytest (and fetch from the Debian mirror).
@pytest.fixture(autouse=True)
def _no_remote_connections(_ssh_shims: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if not _local(address):
            raise AssertionError(f"unit tests connect to no other machine: {address!r}")
        real_connect(self, address)

    monkeypatch.setenv("PATH", f"{_ssh_shims}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(socket.socket, "connect", connect)
    yield
