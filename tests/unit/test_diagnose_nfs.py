"""The NFS part of `appliance diagnose`'s storage layer: nfsperf.py (the script a node runs)
against stand-ins for libnfs-utils' nfs-cp and nfs-cat and for its libnfs calls, all on a local
directory (no NFS, no network): the file written, read back and removed, even when the write or
the read fails; then recorded outputs parsed, ranked, skipped and failed, and every report."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance_cli.core.checks import diagnose, nfsperf
from appliance_cli.core.checks import report as reports
from appliance_cli.core.checks.diagnose import measure_nfs, nfs_results, rank
from appliance_cli.core.checks.model import NodeFacts, Report, Status
from appliance_cli.core.checks.probe import parse
from appliance_cli.core.siteconfig import SiteConfig, load_site
from tests._support.paths import EXAMPLE, ROOT

SCRIPT = ROOT / "appliance_cli" / "core" / "checks" / "nfsperf.py"
SERVER, EXPORT = "127.0.0.1", "/srv/nfs"
# nfs-cp SRC URL / nfs-cat URL on the directory $FAKE_EXPORT; FAKE_FAIL=write|read|slow-read
# fails the way a read-only export or a dead filer does (the write leaves half a file first)
NFS_CP = """#!/bin/sh
echo "$2" >> "$FAKE_EXPORT.urls"
rel=${2#nfs://*/srv/nfs/}; rel=${rel%%\\?*}
if [ "$FAKE_FAIL" = write ]; then
  head -c 1000 "$1" > "$FAKE_EXPORT/$rel"
  echo "Failed to write to nfs://127.0.0.1/srv/nfs/$rel: NFS3ERR_ROFS(-30)" >&2; exit 1
fi
cat "$1" > "$FAKE_EXPORT/$rel"
"""
NFS_CAT = """#!/bin/sh
rel=${1#nfs://*/srv/nfs/}; rel=${rel%%\\?*}
case "$FAKE_FAIL" in
  read) head -c 1000 "$FAKE_EXPORT/$rel"; echo "NFS3ERR_IO(-5) reading $rel" >&2; exit 1 ;;
  slow-read) exec sleep 30 ;;
esac
cat "$FAKE_EXPORT/$rel"
"""


@pytest.fixture
def export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[tuple[str, str]]]:
    """(the export's directory, the libnfs calls made) with the client stand-ins on PATH."""
    bindir, root = tmp_path / "bin", tmp_path / "export"
    bindir.mkdir()
    root.mkdir()
    for name, text in (("nfs-cp", NFS_CP), ("nfs-cat", NFS_CAT)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_EXPORT", str(root))
    calls: list[tuple[str, str]] = []

    def libnfs(op: str, server: str, path: str, name: str) -> tuple[str, int, str]:
        assert (server, path) == (SERVER, EXPORT)
        calls.append((op, name))
        if os.environ.get("FAKE_FAIL") == "mount":
            return "mount", -errno.ETIMEDOUT, "mount_cb: RPC error: Mount failed with error MNT3ERR_ACCES(13)"
        if os.environ.get("FAKE_FAIL") == "unlink" and op == "unlink":
            return op, -errno.EACCES, "UNLINK failed with NFS3ERR_ACCES(-13)"
        try:
            {"mkdir": os.mkdir, "unlink": os.unlink, "rmdir": os.rmdir}[op](root / name)
        except OSError as exc:
            return op, -exc.errno, exc.strerror
        return op, 0, ""

    monkeypatch.setattr(nfsperf, "libnfs", libnfs)
    return root, calls


def _measure(capsys: pytest.CaptureFixture[str], mb: float = 1, seconds: float = 10) -> dict[str, str]:
    nfsperf.main(SERVER, EXPORT, "gpu1", mb, seconds)
    return {k: v for k, v in parse("gpu1", capsys.readouterr().out + "probe_end=1\n").values.items() if k != "probe_end"}  # fmt: skip


CLEANUP = [("unlink", ".appliance-diagnose/gpu1"), ("rmdir", ".appliance-diagnose")]


def test_a_node_writes_reads_back_and_removes_its_file(export, capsys) -> None:
    root, calls = export
    got = _measure(capsys, mb=2)
    assert set(got) == {"nfs_write_mbps", "nfs_read_mbps", "nfs_bytes"}, got
    assert got["nfs_bytes"] == str(2 * 1048576) and float(got["nfs_write_mbps"]) > 0 < float(
        got["nfs_read_mbps"]
    )
    # two rounds (the best of each): the first round's file is removed before the second's write
    assert calls == [("mkdir", ".appliance-diagnose"), CLEANUP[0], *CLEANUP] and list(root.iterdir()) == []
    # as root (uid 0 in the URL), under the hidden directory, named after the node
    url = "nfs://127.0.0.1/srv/nfs/.appliance-diagnose/gpu1?uid=0&gid=0\n"
    assert Path(f"{root}.urls").read_text() == 2 * url


def test_a_read_only_export_is_a_write_error_and_the_half_file_is_removed(
    export, capsys, monkeypatch
) -> None:
    root, calls = export
    monkeypatch.setenv("FAKE_FAIL", "write")
    got = _measure(capsys)
    assert got == {"nfs_write_error": "127.0.0.1:/srv/nfs read-only (nfs-cp: NFS3ERR_ROFS(-30))"}
    assert calls[1:] == CLEANUP and list(root.iterdir()) == []


@pytest.mark.parametrize(
    ("fail", "seconds", "why"),
    [
        ("read", 10, "127.0.0.1:/srv/nfs: read back 1000 of 1048576 bytes: nfs-cat: NFS3ERR_IO(-5)"),
        ("slow-read", 1, "127.0.0.1:/srv/nfs: read back 0 of 1048576 bytes: not done within 1s"),
    ],
)
def test_a_failed_or_stalled_read_is_a_read_error_and_the_file_is_removed(export, capsys, monkeypatch, fail, seconds, why) -> None:  # fmt: skip
    root, calls = export
    monkeypatch.setenv("FAKE_FAIL", fail)
    got = _measure(capsys, seconds=seconds)
    assert got.pop("nfs_write_mbps") and got == {"nfs_read_error": why}
    assert calls[1:] == CLEANUP and list(root.iterdir()) == []


def test_an_unreachable_export_is_named_before_anything_is_written(export, capsys, monkeypatch) -> None:
    root, calls = export
    monkeypatch.setenv("FAKE_FAIL", "mount")
    got = _measure(capsys)
    assert got == {"nfs_write_error": "127.0.0.1:/srv/nfs not reachable (mount_cb: RPC error: Mount failed with "
                   "error MNT3ERR_ACCES(13))"}  # fmt: skip
    assert calls == [("mkdir", ".appliance-diagnose")] and not Path(f"{root}.urls").exists()


def test_a_file_that_cannot_be_removed_is_reported(export, capsys, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_FAIL", "unlink")
    got = _measure(capsys)
    assert got["nfs_cleanup_error"] == (".appliance-diagnose/gpu1 is left on 127.0.0.1:/srv/nfs: "
                                        "UNLINK failed with NFS3ERR_ACCES(-13)")  # fmt: skip
    assert "nfs_read_mbps" in got


def test_the_script_skips_without_the_libnfs_tools(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nfs-cp").write_text("#!/bin/sh\nexit 99\n")
    (bindir / "nfs-cp").chmod(0o755)
    r = subprocess.run([sys.executable, "-", SERVER, EXPORT, "gpu1", "64", "26"], input=SCRIPT.read_text(),
                       capture_output=True, text=True, timeout=60, env={"PATH": str(bindir)})  # fmt: skip
    assert r.returncode == 0 and r.stdout == (
        "nfs_skip=libnfs-utils (nfs-cat) is not installed yet: the install's storage_nfs role adds it\n"
    ), r.stderr


def test_a_client_call_is_stopped_at_its_time_limit() -> None:
    got, elapsed, why = nfsperf.transfer(["sleep", "30"], 0.3)
    assert (got, why) == (0, "not done within 0.3s") and elapsed < 5
    assert nfsperf.transfer(["head", "-c", "3000000", "/dev/zero"], 10)[::2] == (3000000, "")


def test_a_libnfs_call_that_cannot_run_is_an_error_not_a_traceback(monkeypatch) -> None:
    monkeypatch.setattr(nfsperf.sys, "executable", shutil.which("false") or "/bin/false")
    stage, rc, message = nfsperf.libnfs("mkdir", SERVER, EXPORT, ".appliance-diagnose")
    assert (stage, rc) == ("mkdir", -1) and message == "exit 1"


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> SiteConfig:
    d = tmp_path_factory.mktemp("site")
    shutil.copy(EXAMPLE, d / "appliance.yml")
    return load_site(d)


# nfsperf.py's output on three nodes, as recorded: gpu2 writes at a quarter of its peers' rate
RECORDED = {
    "master1": "nfs_write_mbps=412.7\nnfs_read_mbps=980.2\nnfs_bytes=268435456\n",
    "gpu1": "nfs_write_mbps=398.1\nnfs_read_mbps=1011.4\nnfs_bytes=268435456\n",
    "gpu2": "nfs_write_mbps=101.3\nnfs_read_mbps=955.0\nnfs_bytes=268435456\n",
}


def _recorded(node: str, text: str) -> NodeFacts:
    return parse(node, text + "virt_type=none\nprobe_end=1\n")


def test_a_slow_nfs_write_is_ranked_against_the_other_nodes(cfg: SiteConfig) -> None:
    facts = {n: _recorded(n, t) for n, t in RECORDED.items()}
    ranked = {
        (r.node, r.check): (share, r) for share, r in rank(cfg, cfg.nodes, facts) if r.layer == "storage"
    }
    assert set(ranked) == {(n, c) for n in RECORDED for c in ("nfs_write", "nfs_read")}
    share, slow = ranked["gpu2", "nfs_write"]
    assert (slow.status, slow.value, slow.unit, slow.better) == (Status.FAIL, "101.3 MB/s", "MB/s", "higher")
    assert slow.expected == "peers' median 405.4 MB/s" and share == pytest.approx(101.3 / 405.4)
    assert "look at this node's storage" in slow.hint
    assert all(
        r.status is Status.PASS for (n, c), (_, r) in ranked.items() if (n, c) != ("gpu2", "nfs_write")
    )
    assert diagnose.bottleneck(list(ranked.values())) == slow


def test_no_nfs_section_and_no_client_are_skips_saying_why(cfg: SiteConfig) -> None:
    bare = cfg.model_copy(update={"nfs": None})
    for r in nfs_results(bare, cfg.node("gpu1"), _recorded("gpu1", "")):
        assert (r.status, r.hint) == (
            Status.SKIP,
            "the site config has no nfs: section (no NFS export to measure)",
        )
    assert (
        measure_nfs(bare, cfg.nodes, diagnose.Transport(argv=lambda n, c: pytest.fail("no NFS test")), 64)
        == {}
    )
    why = "libnfs-utils (nfs-cp, nfs-cat) is not installed yet: the install's storage_nfs role adds it"
    skips = nfs_results(cfg, cfg.node("gpu1"), _recorded("gpu1", f"nfs_skip={why}\n"))
    assert [(r.check, r.status, r.hint) for r in skips] == [
        ("nfs_write", Status.SKIP, why),
        ("nfs_read", Status.SKIP, why),
    ]
    assert nfs_results(cfg, cfg.node("gpu1"), _recorded("gpu1", RECORDED["gpu1"])) == []  # ranked instead


def test_a_failure_names_the_node_the_export_and_its_answer_with_a_hint(cfg: SiteConfig) -> None:
    node = cfg.node("gpu1")
    why = "192.168.10.5:/export/runai read-only (nfs-cp: NFS3ERR_ROFS(-30))"
    write, read = nfs_results(cfg, node, _recorded("gpu1", f"nfs_write_error={why}\n"))
    assert (write.check, write.layer, write.node, write.status, write.value) == (
        "nfs_write",
        "storage",
        "gpu1",
        Status.FAIL,
        why,
    )
    assert (
        "`appliance preflight` checks the export" in write.hint and f"to gpu1 ({node.address})" in write.hint
    )
    assert (read.check, read.status, read.hint) == ("nfs_read", Status.SKIP, "not measured: the write failed")
    [bad] = nfs_results(
        cfg, node, _recorded("gpu1", "nfs_write_mbps=400.0\nnfs_read_error=x: read back 0 of 9 bytes\n")
    )
    assert (bad.check, bad.status, bad.value) == ("nfs_read", Status.FAIL, "x: read back 0 of 9 bytes")
    [left] = nfs_results(
        cfg,
        node,
        _recorded("gpu1", RECORDED["gpu1"] + "nfs_cleanup_error=.appliance-diagnose/gpu1 is left\n"),
    )
    assert (left.check, left.status, left.hint) == ("nfs_cleanup", Status.WARN, "remove it on the filer")


def test_measure_nfs_sends_the_script_with_bounded_sizes_and_times(cfg: SiteConfig) -> None:
    seen: list[tuple[list[str], int]] = []

    def run(node, command, stdin, timeout=300):
        seen.append((command, timeout))
        assert stdin == SCRIPT.read_text()
        if node.name == "gpu2":
            raise subprocess.TimeoutExpired(command, timeout)
        return (
            (0, RECORDED[node.name], "")
            if node.name == "gpu1"
            else (255, "", "ssh: connect to host: No route")
        )

    t = diagnose.Transport(argv=lambda n, c: c)
    t.run = run  # type: ignore[method-assign]
    out = measure_nfs(cfg, [cfg.node(n) for n in ("gpu1", "gpu2", "master1")], t, 64)
    assert out["gpu1"].get("nfs_write_mbps") == "398.1"
    assert out["gpu2"].get("nfs_write_error") == "the NFS test gave no answer within 194s (stopped)"
    assert (
        out["master1"].get("nfs_write_error").endswith("SSH cannot connect: ssh: connect to host: No route")
    )
    assert seen[0] == (["python3", "-", "192.168.10.5", "/export/runai", "gpu1", "64", "26"], 194)
    assert diagnose.nfs_transfer_seconds(256) == 74 and diagnose.NFS_OP_SECONDS == nfsperf.OP_SECONDS
    assert diagnose.NFS_ROUNDS == nfsperf.ROUNDS


def test_every_output_carries_the_nfs_measurements(cfg: SiteConfig, tmp_path: Path) -> None:
    facts = {n: _recorded(n, t) for n, t in RECORDED.items()}
    ranked = rank(cfg, cfg.nodes, facts)
    failed = nfs_results(
        cfg, cfg.node("gpu1"), _recorded("gpu1", "nfs_write_error=192.168.10.5:/export/runai read-only\n")
    )
    rep = Report(
        "diagnose", cfg.site.name, [r for _, r in ranked] + failed, bottleneck=diagnose.bottleneck(ranked)
    )
    for name, write in (("r.json", reports.write_json), ("r.xml", reports.write_junit),
                        ("r.txt", reports.write_text), ("r.html", reports.write_html)):  # fmt: skip
        write(rep, tmp_path / name)
        text = (tmp_path / name).read_text()
        assert "nfs_write" in text and "nfs_read" in text and "101.3 MB/s" in text, name
        assert "192.168.10.5:/export/runai read-only" in text, name
        assert name == "r.xml" or "980.2 MB/s" in text, name  # JUnit details failures and skips only
    html = (tmp_path / "r.html").read_text()
    assert "<h2>storage — nfs_write (MB/s, higher is better)</h2>" in html
    assert "<h2>storage — nfs_read (MB/s, higher is better)</h2>" in html
    junit = (tmp_path / "r.xml").read_text()
    assert 'name="nfs_write[gpu1]"' in junit and "<failure" in junit
