"""`appliance diagnose` on real lab nodes: a node whose link is rate-limited with tc is named as
the bottleneck, `report compare` flags that regression and nothing else, and the HTML report
renders its plots in a real browser (headless Chromium; the screenshot is kept as an artifact)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance_cli.core.siteconfig import SiteConfig, load_site
from tests._support.lab_nodes import run_as_root

ARTIFACTS = Path(os.environ.get("APPLIANCE_TEST_ARTIFACTS", "/var/lib/appliance/test-artifacts"))


@pytest.fixture(scope="module")
def lab_site(own_lab_cm) -> Iterator[SiteConfig]:
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("rate-limits a node's link on purpose: lab only")
    with own_lab_cm("dia", 4) as layout:
        yield load_site(layout.site_dir)


@pytest.fixture(scope="module")
def runs(lab_site, cli, tmp_path_factory):
    """A diagnose of the healthy lab, then one with worker2's link limited to 50 Mb/s."""
    out = tmp_path_factory.mktemp("diagnose")
    before = cli("diagnose", str(lab_site.site_dir), "--quick", "--json", str(out / "before.json"))
    slow = lab_site.nodes[2].name
    run_as_root(slow, "tc qdisc add dev eth0 root tbf rate 50mbit burst 64kb latency 50ms")
    try:
        after = cli("diagnose", str(lab_site.site_dir), "--quick", "--json", str(out / "after.json"),
                    "--html", str(out / "after.html"), "--junit", str(out / "after.xml"), "--text", str(out / "after.txt"))  # fmt: skip
    finally:
        run_as_root(slow, "tc qdisc del dev eth0 root")
    return out, slow, before, after


def test_the_rate_limited_node_is_the_bottleneck(runs):
    out, slow, before, after = runs
    assert before.rc == 0 and after.rc == 0, after.err[-2000:]
    assert f"bottleneck: network on {slow}: throughput_to_master" in after.out
    doc = json.loads((out / "after.json").read_text())
    assert (doc["bottleneck"]["node"], doc["bottleneck"]["layer"]) == (slow, "network")
    assert doc["bottleneck"]["number"] < 60  # Mb/s: tc's 50 Mb/s, measured
    for f in ("after.html", "after.xml", "after.txt"):
        assert (out / f).stat().st_size > 0, f


def test_report_compare_flags_the_injected_regression_and_nothing_else(runs, cli):
    out, slow, *_ = runs
    # 50 %: the injected regression is -99 %; CPU and memory of nodes sharing 2 busy cores move by 20-30 %
    r = cli("report", "compare", str(out / "before.json"), str(out / "after.json"), "--threshold", "0.5")
    assert r.rc == 8, r.out[-2000:] + r.err[-1000:]
    assert f"error: 1 regression(s): {slow} network/throughput_to_master -" in r.err


def test_the_html_report_renders_its_plots_in_a_browser(runs):
    out, *_ = runs
    browser = shutil.which("chromium")
    assert browser, "chromium is missing: scripts/bootstrap.sh installs it"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "diagnose-report.png"
    shot.unlink(missing_ok=True)
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                        "--window-size=1000,1400", f"file://{out / 'after.html'}"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and shot.stat().st_size > 20_000, r.stderr[-1000:]
    # the bars are there: a bar chart is mostly coloured pixels, a failed render mostly white
    from PIL import Image

    raw = Image.open(shot).convert("RGB").tobytes()
    pixels = [raw[i : i + 3] for i in range(0, len(raw), 3)]
    green = sum(1 for p in pixels if p[1] > 140 and p[0] < 80 and p[2] < 110)
    red = sum(1 for p in pixels if p[0] > 180 and p[1] < 60 and p[2] < 70)
    assert green > 5_000 and red > 20, (green, red)
