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
