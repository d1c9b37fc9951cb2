"""The AOU's analysis on measurements as the probes print them: ranking against peers and the
hardware class, the bottleneck, run-to-run comparison, and the HTML report."""

from __future__ import annotations

import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from appliance_cli.core.checks.compare import compare
from appliance_cli.core.checks.diagnose import bottleneck, gpu_results, rank
from appliance_cli.core.checks.model import CheckResult, NodeFacts, Report, Status
from appliance_cli.core.checks.probe import parse
from appliance_cli.core.checks.report import BAR_MAX, charts, write_html
from appliance_cli.core.siteconfig import SiteConfig, load_site
from tests._support.paths import EXAMPLE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> SiteConfig:
    d = tmp_path_factory.mktemp("site")
    shutil.copy(EXAMPLE, d / "appliance.yml")
    return load_site(d)


def _facts(cfg: SiteConfig, container: bool = True, **per_node: dict[str, float]) -> dict[str, NodeFacts]:
    out = {}
    for n in cfg.nodes:
        values = {
            "cpu_sha256_mbps": 300.0,
            "mem_copy_mbps": 30000.0,
            "disk_write_mbps": 1500.0,
        } | per_node.get(n.name, {})
        text = "".join(f"{k}={v}\n" for k, v in values.items())
        out[n.name] = parse(n.name, text + f"virt_type={'container' if container else 'none'}\nprobe_end=1\n")
    return out


def _report(cfg: SiteConfig, facts: dict[str, NodeFacts]) -> Report:
    ranked = rank(cfg, cfg.nodes, facts)
    rep = Report("diagnose", cfg.site.name, [r for _, r in ranked])
    rep.bottleneck = bottleneck(ranked)
    return rep


def test_a_rate_limited_link_is_the_bottleneck(cfg: SiteConfig) -> None:
    facts = _facts(
        cfg, gpu1={"net_mbps": 15000.0, "net_rtt_ms": 0.07}, gpu2={"net_mbps": 48.5, "net_rtt_ms": 0.08}
    )
    facts["master1"].values.update(net_mbps="16000", net_rtt_ms="0.06")
    rep = _report(cfg, facts)
    b = rep.bottleneck
    assert b is not None and (b.layer, b.node, b.check, b.status) == (
        "network",
        "gpu2",
        "throughput_to_master",
        Status.FAIL,
    )
    assert b.value == "48.5 Mb/s" and "peers' median" in b.expected
    assert [r.node for r in rep.results if r.status is not Status.PASS] == ["gpu2"]


def test_a_rate_limited_link_is_the_bottleneck_even_where_its_nfs_write_came_out_lower(
    cfg: SiteConfig,
) -> None:
    """Found in a fresh-clone run of 6940e1b: worker2's link limited to 50 Mb/s (48.4 Mb/s) made its
    NFS write 6.0 MB/s against a median of 633.5, both 0.01x, the write the lower, and it was named.
    A node's pull and NFS traffic cross its link: when the link is below too, it is the cause."""
    facts = _facts(
        cfg,
        gpu1={"net_mbps": 5000.0, "nfs_write_mbps": 633.5},
        gpu2={"net_mbps": 48.4, "nfs_write_mbps": 6.0},
    )
    facts["master1"].values.update(net_mbps="5200", nfs_write_mbps="640")
    rep = _report(cfg, facts)
    low = {(r.check, r.status) for r in rep.results if r.node == "gpu2" and r.status is not Status.PASS}
    assert low == {("throughput_to_master", Status.FAIL), ("nfs_write", Status.FAIL)}
    b = rep.bottleneck
    assert b is not None and (b.node, b.layer, b.check) == ("gpu2", "network", "throughput_to_master")
    # a slow NFS write on a node whose link is fine is the storage's own
    facts = _facts(
        cfg,
        gpu1={"net_mbps": 5000.0, "nfs_write_mbps": 633.5},
        gpu2={"net_mbps": 4900.0, "nfs_write_mbps": 6.0},
    )
    facts["master1"].values.update(net_mbps="5200", nfs_write_mbps="640")
    b = _report(cfg, facts).bottleneck
    assert b is not None and (b.node, b.check) == ("gpu2", "nfs_write")


def test_latency_differences_below_the_noise_floor_pass(cfg: SiteConfig) -> None:
    facts = _facts(cfg, gpu1={"net_rtt_ms": 0.04}, gpu2={"net_rtt_ms": 0.12})
    rep = _report(cfg, facts)
    assert all(r.status is Status.PASS for r in rep.results) and rep.bottleneck is None


def test_bare_metal_link_below_its_class_fails_even_when_every_node_is_as_slow(cfg: SiteConfig) -> None:
    facts = _facts(cfg, False, gpu1={"net_mbps": 8000.0}, gpu2={"net_mbps": 8100.0})
    by = {r.node: r for r in _report(cfg, facts).results if r.check == "throughput_to_master"}
    assert by["gpu1"].status is Status.FAIL and "class >= 17500 Mb/s" in by["gpu1"].expected  # 25 Gb/s x 0.7


def test_a_slow_disk_is_named_with_its_share(cfg: SiteConfig) -> None:
    rep = _report(cfg, _facts(cfg, gpu1={"disk_write_mbps": 600.0}))
    disk = next(r for r in rep.results if r.node == "gpu1" and r.check == "disk_write")
    assert disk.status is Status.FAIL and disk.hint.startswith("0.40x") and rep.bottleneck == disk


def test_compare_flags_the_regression_and_not_the_noise(cfg: SiteConfig) -> None:
    before = _report(
        cfg, _facts(cfg, gpu1={"net_mbps": 15000.0, "net_rtt_ms": 0.05}, gpu2={"net_mbps": 15000.0})
    )
    after = _report(
        cfg,
        _facts(
            cfg,
            gpu1={"net_mbps": 48.0, "net_rtt_ms": 0.09, "cpu_sha256_mbps": 250.0},
            gpu2={"net_mbps": 16000.0},
        ),
    )
    flagged = [(d.node, d.check) for d in compare(before, after) if d.regression]
    assert flagged == [("gpu1", "throughput_to_master")]  # not the CPU's -17 %, not 0.04 ms of RTT


def test_lower_is_better_is_compared_the_right_way(cfg: SiteConfig) -> None:
    before = _report(cfg, _facts(cfg, gpu1={"net_rtt_ms": 1.0}))
    after = _report(cfg, _facts(cfg, gpu1={"net_rtt_ms": 5.0}))
    [d] = [d for d in compare(before, after) if d.check == "latency_to_master" and d.node == "gpu1"]
    assert d.regression and d.change == pytest.approx(-4.0)


def test_reports_round_trip_through_json(cfg: SiteConfig) -> None:
    rep = _report(cfg, _facts(cfg, gpu1={"disk_write_mbps": 600.0}))
    again = Report.from_dict(rep.to_dict())
    assert again.results == rep.results and again.bottleneck == rep.bottleneck


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_html_report_is_self_contained_with_one_chart_per_metric(cfg: SiteConfig, tmp_path: Path) -> None:
    rep = _report(cfg, _facts(cfg, gpu1={"disk_write_mbps": 600.0}))
    write_html(rep, tmp_path / "r.html")
    text = (tmp_path / "r.html").read_text()
    p = _Html()
    p.feed(text)
    charts = [a for t, a in p.tags if t == "svg"]
    assert len(charts) == 3  # cpu, memory, disk
    assert sum(t == "rect" for t, _ in p.tags) == 3 * len(cfg.nodes)
    assert not [a for t, a in p.tags if t in ("script", "link", "img")]  # nothing loaded from anywhere
    assert "http://" not in text and "https://" not in text
    assert "Bottleneck: <b>storage</b> on <b>gpu1</b>" in text


def test_a_chart_makes_room_for_a_pair_of_nodes_and_a_long_value() -> None:
    """The bars start past the longest name (`worker1<>worker2`) and the chart is wide enough for the
    longest value, so neither is cut off (seen in the lab's report before)."""
    rows = [CheckResult("pod_pair_latency", "network", name, Status.PASS, f"{ms} ms between their probe pods",
                        number=ms, unit="ms", better="lower") for name, ms in (("m1<>w1", 0.1), ("worker1<>worker2", 0.2))]  # fmt: skip
    (chart,) = charts(Report(kind="diagnose", site="s", results=rows))
    assert chart["label"] >= 7 * len("worker1<>worker2")
    assert chart["width"] >= chart["label"] + BAR_MAX + 7 * len("0.2 ms between their probe pods")


def test_gpu_lines_from_nvidia_smi(cfg: SiteConfig) -> None:
    """diag.sh's --query-gpu CSV (tests/fixtures/gpu/README.md: written after nvidia-smi's formats,
    no GPU was lent): a result per GPU, judged against the GZ2 class's PCIe gen 4."""
    text = (FIXTURES / "query-gpu-gz2-degraded.csv").read_text()
    facts = parse("gpu2", "".join(f"gpu_csv={line}\n" for line in text.splitlines()) + "probe_end=1\n")
    res = gpu_results(cfg, _node("gpu2"), facts)
    assert [r.check for r in res] == [f"gpu{i}" for i in range(8)]
    assert res[0].status is Status.PASS
    assert res[0].value == "NVIDIA A100-SXM4-80GB, PCIe gen4/4 x16/16, uncorrected ECC 0, MIG off"
    assert [r.status for r in res] == [Status.PASS, Status.PASS, Status.FAIL, Status.PASS,
                                       Status.WARN, Status.FAIL, Status.WARN, Status.WARN]  # fmt: skip
    assert res[2].value.endswith("; PCIe gen 3 at most (hardware class: gen 4)") and "BIOS" in res[2].hint
    assert "2 uncorrected ECC errors since the driver loaded" in res[5].value
    garbled = parse("gpu2", "gpu_csv=NVIDIA-SMI has failed\nprobe_end=1\n")
    (bad,) = gpu_results(cfg, _node("gpu2"), garbled)
    assert bad.status is Status.WARN and "no header line" in bad.value


def _node(name: str):
    from appliance_cli.core.siteconfig import Node

    return Node(name=name, address="192.168.10.22", hardware_class="GZ2", roles=["gpu-worker"])
