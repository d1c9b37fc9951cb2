"""`appliance diagnose` on real lab nodes, installed from the lab bundle: the install ends with a
quick diagnose; every node pulls from the real registry on master1 and writes to and reads from
master1's NFS export (nfs-ganesha), leaving nothing on it; a probe pod runs on every node, each
worker's pod path to the master's pod is measured beside its node path, and every pair of probe
pods is timed and streamed; a node whose link is rate-limited with tc is named as the bottleneck
and is in every thin pair of probe pods, `report compare` flags regressions on that node
only, and the HTML report renders its plots in a real browser (headless Chromium; the
screenshot is kept as an artifact)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from appliance_cli.core.siteconfig import SiteConfig
from tests._support.lab_nodes import run_as_root

ARTIFACTS = Path(os.environ.get("APPLIANCE_TEST_ARTIFACTS", "/var/lib/appliance/test-artifacts"))


@pytest.fixture(scope="module")
def installed(site, installs) -> tuple[SiteConfig, Any]:
    """The session lab (4 nodes installed from the lab bundle; the registry on master1 is real),
    and the install that made it."""
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("rate-limits a node's link on purpose: lab only")
    run = installs[0]
    assert run.rc == 0, run.err[-3000:]
    return site, run


@pytest.fixture(scope="module")
def lab_site(installed) -> SiteConfig:
    return installed[0]


def test_the_install_ends_with_the_quick_diagnose(installed):
    cfg, run = installed
    out = run.out[run.out.index("install finished") :]
    assert "quick diagnose (skip it with --skip-diagnose)" in out, run.out[-3000:]
    assert f"diagnose {cfg.site.name}: " in out and f"skipped on {len(cfg.nodes)} nodes in " in out
    assert "bottleneck: " in out


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


def test_the_rate_limited_node_is_in_every_thin_pair_of_probe_pods_and_named(runs, lab_site):
    """tc limits what leaves the node: each pair streams both ways, so every pair with the node is
    thin one way (after its second look), no other pair is, and the hint names the node."""
    out, slow, *_ = runs
    doc = json.loads((out / "after.json").read_text())
    names = [n.name for n in lab_site.nodes]
    rows = {r["node"]: r for r in doc["results"] if r["check"] == "pod_pair_throughput"}
    assert set(rows) == {f"{a}<>{b}" for i, a in enumerate(names) for b in names[i + 1 :]}, sorted(rows)
    thin = {pair for pair, r in rows.items() if r["status"] == "warn"}
    assert thin == {pair for pair in rows if slow in pair.split("<>")}, sorted(thin)
    assert all(f"every slow pair includes {slow}" in rows[pair]["hint"] for pair in thin), rows
    for pair, r in sorted(rows.items()):
        print(f"{pair}: {r['status']} {r['value']} ({r['expected']})")
    print(rows[min(thin)]["hint"])


def test_every_node_pulls_from_the_registry_and_its_pod_path_is_measured(runs, lab_site):
    out, *_ = runs
    doc = json.loads((out / "before.json").read_text())
    pulls = {
        r["node"]: r for r in doc["results"] if (r["layer"], r["check"]) == ("registry", "pull_throughput")
    }
    assert set(pulls) == {n.name for n in lab_site.nodes}, pulls
    assert all(r["number"] > 0 and r["unit"] == "MB/s" for r in pulls.values()), pulls
    # a probe pod ran on every node; each worker's pod reached the master's over the pod network,
    # in the same league as its node path (the lab's pods ride the same veths, under host-gw routes)
    rows = {(r["check"], r["node"]): r for r in doc["results"]}
    master, workers = lab_site.master.name, [n.name for n in lab_site.nodes if n.name != lab_site.master.name]
    for n in lab_site.nodes:
        start = rows[("probe_pod_start", n.name)]
        assert start["status"] == "pass" and 0 < start["number"] < 60, start
    assert rows[("pod_network", master)]["status"] == "skip", rows[("pod_network", master)]
    for name in workers:
        path, rtt = rows[("pod_network", name)], rows[("pod_latency", name)]
        assert path["status"] == "pass" and path["number"] > 0 and path["unit"] == "Mb/s", path
        assert rtt["number"] > 0 and "node path" in rtt["expected"], rtt
        print(
            f"{name}: pod path {path['value']} ({path['expected']}); {rtt['value']} ({rtt['expected']}); "
            f"probe pod {rows[('probe_pod_start', name)]['value']}"
        )
    names = [n.name for n in lab_site.nodes]
    want = {f"{a}<>{b}" for i, a in enumerate(names) for b in names[i + 1 :]}
    for check, unit in (("pod_pair_latency", "ms"), ("pod_pair_throughput", "Mb/s")):
        pairs = {r["node"]: r for r in doc["results"] if r["check"] == check}
        assert set(pairs) == want, (check, sorted(pairs))
        for pair, r in sorted(pairs.items()):
            # warn: one pair slower than the best on 2 shared cores, even after its second look
            assert r["status"] in ("pass", "warn") and r["number"] > 0 and r["unit"] == unit, r
            print(f"{check} {pair}: {r['value']} ({r['expected']})")
    assert not any(r["check"] == "probe_pod_cleanup" for r in doc["results"])


def test_every_node_writes_and_reads_the_nfs_export_and_leaves_nothing_on_it(runs, lab_site):
    out, *_ = runs
    assert lab_site.nfs is not None and lab_site.nfs.server == lab_site.master.address
    for name in ("before.json", "after.json"):
        doc = json.loads((out / name).read_text())
        for check in ("nfs_write", "nfs_read"):
            got = {r["node"]: r for r in doc["results"] if (r["layer"], r["check"]) == ("storage", check)}
            assert set(got) == {n.name for n in lab_site.nodes}, (name, got)
            assert all(r["number"] > 0 and r["unit"] == "MB/s" for r in got.values()), (name, got)
        assert not [r for r in doc["results"] if r["check"] == "nfs_cleanup"], name
    for name in ("after.xml", "after.txt", "after.html"):
        text = (out / name).read_text()
        assert "nfs_write" in text and "nfs_read" in text, name
    # ganesha exports master1's own directory: what is in it is what is on the export
    listing = run_as_root(lab_site.master.name, f"ls -A {lab_site.nfs.path}")
    assert ".appliance-diagnose" not in listing, listing


def test_report_compare_flags_the_injected_regression_and_nothing_else(runs, cli):
    out, slow, *_ = runs
    # 90 %: the injected regression is -98 to -100 %. An untouched node's numbers move with the load
    # the other test process puts on the 2 shared cores: CPU and memory by 20-30 %, and once (CI at
    # 98b8ad5, two labs at once) worker3's throughput to the master by 57 %, all on veths.
    r = cli("report", "compare", str(out / "before.json"), str(out / "after.json"), "--threshold", "0.9")
    assert r.rc == 8, r.out[-2000:] + r.err[-1000:]
    line = next(x for x in r.err.splitlines() if "regression(s): " in x)
    named = line.split("regression(s): ", 1)[1].split("; ")
    # its link out is limited: the stream to the master, and maybe its pull (whose ACKs go out of it),
    # and its probe pod's paths: to the master's pod and in the pairs it is part of
    assert f"{slow} network/throughput_to_master" in [n.rsplit(" ", 1)[0] for n in named], line
    assert all(slow in n.split(" ", 1)[0].split("<>") for n in named), line


def test_the_html_report_renders_its_plots_in_a_browser(runs):
    out, *_ = runs
    browser = shutil.which("chromium")
    assert browser, "chromium is missing: scripts/bootstrap.sh installs it"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "diagnose-report.png"
    shot.unlink(missing_ok=True)
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                        "--window-size=1000,2600", f"file://{out / 'after.html'}"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and shot.stat().st_size > 20_000, r.stderr[-1000:]
    # the bars are there: a bar chart is mostly coloured pixels, a failed render mostly white
    from PIL import Image

    raw = Image.open(shot).convert("RGB").tobytes()
    pixels = [raw[i : i + 3] for i in range(0, len(raw), 3)]
    green = sum(1 for p in pixels if p[1] > 140 and p[0] < 80 and p[2] < 110)
    red = sum(1 for p in pixels if p[0] > 180 and p[1] < 60 and p[2] < 70)
    assert green > 5_000 and red > 20, (green, red)


def test_a_read_only_export_fails_every_nodes_nfs_write_and_leaves_nothing(lab_site, cli, tmp_path):
    from tests._support.lab_nodes import set_nfs_export_read_only

    assert lab_site.nfs is not None
    export = f"{lab_site.nfs.server}:{lab_site.nfs.path}"
    set_nfs_export_read_only(lab_site.nfs.path, True)
    try:
        run = cli("diagnose", str(lab_site.site_dir), "--quick", "--json", str(tmp_path / "ro.json"))
    finally:
        set_nfs_export_read_only(lab_site.nfs.path, False)
    assert run.rc == 0 and "Traceback" not in run.err, run.err[-2000:]
    doc = json.loads((tmp_path / "ro.json").read_text())
    writes = {r["node"]: r for r in doc["results"] if r["check"] == "nfs_write"}
    assert set(writes) == {n.name for n in lab_site.nodes}, writes
    for node, r in writes.items():
        assert r["status"] == "fail" and r["value"].startswith(f"{export} read-only ("), r
        assert "NFS3ERR_ROFS" in r["value"] and "`appliance preflight` checks the export" in r["hint"], r
        assert f"{node}: storage/nfs_write: {export} read-only" in run.out + run.err
    listing = run_as_root(lab_site.master.name, f"ls -A {lab_site.nfs.path}")
    assert ".appliance-diagnose" not in listing, listing
