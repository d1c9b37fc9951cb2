"""The guard in tests/unit/conftest.py: it must refuse, or it guards nothing."""

from __future__ import annotations

import socket
import subprocess

import pytest


def test_guard_refuses_ssh_and_remote_sockets() -> None:
    out = subprocess.run(
        ["ssh", "-o", "ConnectTimeout=1", "-p", "22", "ubuntu@192.168.10.11", "true"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 255 and "unit tests open no SSH connection but to loopback" in out.stderr
    with socket.socket() as s, pytest.raises(AssertionError, match=r"192\.168\.10\.11"):
        s.connect(("192.168.10.11", 22))
