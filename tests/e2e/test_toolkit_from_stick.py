"""The toolkit from the stick: a lab node with no toolkit installs it from the lab bundle with
install-toolkit.sh, with no network beyond the lab (the lab has no route out), and then runs it.

Its own one-node lab (APPLIANCE_LAB_NAME=stick), torn down at the end, with no bundle plugged in
by the lab: the session's signed lab bundle (conftest `lab_bundle`) is copied onto master1 where
the USB stick is mounted on a real master, as a plain directory tree like a FAT stick's."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from appliance_cli import __version__, lab
from appliance_cli.bundle.model import INSTALL_SCRIPT
from appliance_cli.lab.layout import LabLayout

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        bool(os.environ.get("APPLIANCE_E2E_SITE")),
        reason="brings up its own rehearsal lab: not for a real site",
    ),
]
LAB_NAME = "stick"
STICK = "/media/appliance-usb/bundle"  # where the field engineer's stick is mounted
NODE = "master1"


@pytest.fixture(scope="module")
def layout(lab_bundle, own_lab_cm) -> Iterator[LabLayout]:
    assert lab_bundle.path.joinpath(INSTALL_SCRIPT).is_file()
    with own_lab_cm(LAB_NAME, nodes=1) as layout:
        yield layout


def ssh(command: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        lab.ssh_argv(NODE, [command]), capture_output=True, text=True, timeout=timeout, check=False
    )


def test_node_installs_the_toolkit_from_the_stick_offline(layout: LabLayout, lab_bundle) -> None:
    # a fresh node: no toolkit
    none = ssh("command -v appliance; ls /opt/appliance")
    assert none.returncode != 0 and none.stdout.strip() == "", none.stdout

    # no network beyond the lab: the bridge namespace has no uplink and no default route, so the
    # node's default route (via the bridge) ends there; a connection out fails on the node
    links = subprocess.run(
        ["ip", "-n", layout.netns, "-o", "link"], capture_output=True, text=True, check=True
    ).stdout
    assert sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines()) == [
        "br0",
        "lo",
        "v-node1",
    ]
    routes = subprocess.run(["ip", "-n", layout.netns, "route"], capture_output=True, text=True, check=True)
    assert "default" not in routes.stdout
    probe = "import socket; socket.create_connection(('1.1.1.1', 443), timeout=5)"
    out = ssh(f'python3 -c "{probe}"')
    assert out.returncode != 0, out.stdout
    assert any(m in out.stderr for m in ("unreachable", "No route to host", "timed out")), out.stderr

    # plug in the stick: the lab bundle, copied where a real master mounts it (no exec bits: FAT)
    stick = layout.node_root(NODE) / STICK.lstrip("/")
    shutil.rmtree(stick, ignore_errors=True)
    shutil.copytree(lab_bundle.path, stick)
    os.chmod(stick / INSTALL_SCRIPT, 0o644)
    shutil.copy(lab_bundle.public_key, layout.node_root(NODE) / "root" / "bundle.pub")

    # not as root: one line, exit 3
    r = ssh(f"sh {STICK}/{INSTALL_SCRIPT}")
    assert r.returncode == 3 and "run it as root" in r.stderr, r.stderr

    # the signer's key, brought apart from the stick: manifest.sig is checked against it first
    started = time.monotonic()
    first = ssh(f"sudo sh {STICK}/{INSTALL_SCRIPT} --key /root/bundle.pub")
    took = time.monotonic() - started
    assert first.returncode == 0, first.stdout + first.stderr
    print(f"install-toolkit.sh on {NODE}: {took:.1f}s\n{first.stdout}")
    assert "controller Python: /usr/bin/python3.11 (3.11)" in first.stdout  # the wheels are cp311
    assert "manifest.json: signature valid (key sha256:" in first.stdout
    assert f"installed: appliance {__version__} in /opt/appliance/venv" in first.stdout
    assert "next:\n  appliance init /root/site" in first.stdout

    # the toolkit runs on the node, compiled dependencies included: it verifies its own stick
    assert ssh("appliance --version").stdout.strip() == f"appliance {__version__}"
    assert ssh("readlink /usr/local/bin/appliance").stdout.strip() == "/opt/appliance/venv/bin/appliance"
    assert "bundle" in ssh("appliance --help").stdout
    verify = ssh(f"sudo appliance bundle verify {STICK} --key /root/bundle.pub --require-signature")
    assert verify.returncode == 0 and "OK" in verify.stdout + verify.stderr, verify.stdout + verify.stderr
    shipped = ssh(
        "ls /opt/appliance/venv/lib/python3.11/site-packages/appliance_cli/bundle/install-toolkit.sh"
    )
    assert shipped.returncode == 0  # the wheel carries the template, for bundles built on site

    # bash completion, from the installed toolkit's own parser, where bash-completion loads it
    completion = "/usr/share/bash-completion/completions/appliance"
    assert f"bash completion: {completion}" in first.stdout
    drive = f"source {completion}; COMP_WORDS=(appliance node d); COMP_CWORD=2; _appliance; echo ${{COMPREPLY[*]}}"
    tab = ssh(f"bash -c {shlex.quote(drive)}")
    assert tab.returncode == 0 and tab.stdout.strip() == "drain", tab.stdout + tab.stderr

    # idempotent
    again = ssh(f"sudo sh {STICK}/{INSTALL_SCRIPT} --key /root/bundle.pub")
    assert again.returncode == 0 and "already installed from this bundle, nothing to do" in again.stdout
