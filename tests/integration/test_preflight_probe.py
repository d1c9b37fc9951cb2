"""The real probe (probe.sh) run on this machine as if it were each node of a loopback site, the
checks on its answers, and the reports: a port really held open is found, the reports parse."""

from __future__ import annotations

import json
import socket
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from appliance_cli.core.checks import report as reports
from appliance_cli.core.checks.model import Status
from appliance_cli.core.checks.preflight import run_preflight
from appliance_cli.core.siteconfig import Node, SiteConfig, load_site
from tests._support.paths import EXAMPLE

pytestmark = pytest.mark.integration


def _local(node: Node, args: list[str], script: str) -> tuple[int, str, str]:
    r = subprocess.run(["sh", "-s", "--", *args], input=script, capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout, r.stderr


@pytest.fixture
def site(tmp_path: Path) -> SiteConfig:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["network"]["node_cidr"] = "127.0.0.0/24"
    for i, node in enumerate(data["nodes"], start=1):
        node["address"] = f"127.0.0.{i}"
    data["nfs"]["server"] = "127.0.0.1"  # whatever client this machine has talks to loopback only
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    return load_site(tmp_path)


def test_a_port_held_open_on_the_master_fails_the_preflight(site: SiteConfig, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 6443))
        s.listen()
        seen = []
        rep = run_preflight(site, transport=_local, on_result=seen.append)
    ports = {r.node: r for r in rep.results if r.check == "ports"}
    assert ports["master1"].status is Status.FAIL and ports["master1"].value == "in use: 6443"
    assert ports["gpu1"].status is Status.PASS  # a worker needs only 10250
    assert seen == rep.results and rep.seconds < 10
    # every node answered with the whole probe
    assert not [r for r in rep.results if r.check == "reachable"]

    reports.write_json(rep, tmp_path / "r.json")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["counts"]["fail"] == len(rep.failed) and doc["results"][0]["status"] in {
        s.value for s in Status
    }
    reports.write_junit(rep, tmp_path / "r.xml")
    root = ET.parse(tmp_path / "r.xml").getroot()
    failures = [tc.get("name") for tc in root.iter("testcase") if tc.find("failure") is not None]
    assert "ports[master1]" in failures and len(failures) == len(rep.failed)
    reports.write_text(rep, tmp_path / "r.txt")
    assert (tmp_path / "r.txt").read_text().splitlines()[1].startswith("FAIL")


def _fake_nfs_client(bin_dir: Path, cp_error: str | None) -> None:
    """nfs-ls / nfs-cp stand-ins that print what libnfs-utils 4.0 prints (and log their argv)."""
    bin_dir.mkdir()
    log = bin_dir / "calls.log"
    (bin_dir / "nfs-ls").write_text(
        f'#!/bin/sh\necho "nfs-ls $*" >> {log}\n'
        "printf -- '-rw-rw----  1     0     0            3 a\\n\\n244969041920 of 270553174016 bytes free.\\n'\n"
    )
    cp = f"echo '{cp_error}' >&2; exit 10" if cp_error else "echo 'copied 32 bytes'"
    (bin_dir / "nfs-cp").write_text(f'#!/bin/sh\necho "nfs-cp $*" >> {log}\n{cp}\n')
    for f in ("nfs-ls", "nfs-cp"):
        (bin_dir / f).chmod(0o755)


@pytest.mark.parametrize(
    ("cp_error", "status", "value"),
    [
        # written, but no NFS server here to remove the probe file from (libnfs): said, not hidden
        (None, Status.WARN, "reachable, writable (probe file .appliance-preflight-master1 left behind)"),
        (
            'Failed to creat file /.p: creat call failed with "NFS: CREATE of /.p failed with NFS3ERR_ROFS(-30)"',
            Status.FAIL,
            "127.0.0.1:/export/runai read-only (NFS3ERR_ROFS(-30))",
        ),
    ],
)
def test_the_probe_lists_and_writes_the_export_as_root(
    site: SiteConfig, tmp_path: Path, cp_error, status, value
) -> None:
    import os

    bin_dir = tmp_path / "bin"
    _fake_nfs_client(bin_dir, cp_error)

    def with_client(node: Node, args: list[str], script: str) -> tuple[int, str, str]:
        env = os.environ | {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
        r = subprocess.run(
            ["sh", "-s", "--", *args], input=script, capture_output=True, text=True, timeout=30, env=env
        )
        return r.returncode, r.stdout, r.stderr

    rep = run_preflight(site, transport=with_client, limit={"master1"})
    got = {r.check: r for r in rep.results if r.layer == "storage"}
    assert (got["nfs_export"].status, got["nfs_export"].value) == (status, value)
    assert (got["nfs_space"].status, got["nfs_space"].value) == (Status.PASS, "245 GB free")
    calls = (bin_dir / "calls.log").read_text()
    assert "nfs-ls -s nfs://127.0.0.1/export/runai?uid=0&gid=0" in calls
    assert "nfs://127.0.0.1/export/runai/.appliance-preflight-master1?uid=0&gid=0" in calls
