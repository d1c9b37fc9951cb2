"""The helm role's helm_chart module (roles/helm/library/helm_chart.py): a chart archive of the
bundle kept on the master, fetched from the bundle server (here a real HTTP server on loopback)
only when missing or different, kept only when it matches the manifest's sha256, then read with
`helm show chart|values` (answered by the module double). A mismatch fails as get_url did, so
`appliance install` still names the blob to remove."""

from __future__ import annotations

import hashlib
import http.server
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance_cli.runner.translate import CHECKSUM_KIND, GET_URL_CHECKSUM, translate
from tests._support.modules import FakeModule, ModuleFailed, load_role_module

hc = load_role_module("helm", "helm_chart")

CHART = b"\x1f\x8b gpu-operator-v24.6.2.tgz bytes"
ARCHIVE = "gpu-operator-v24.6.2.tgz"
CHART_YAML = "apiVersion: v2\nname: gpu-operator\nversion: v24.6.2\nkubeVersion: '>= 1.16.0-0'\n"
VALUES_YAML = "operator:\n  repository: nvcr.io/nvidia\n"


class Served:
    """A loopback HTTP server for one file; `body` is what it serves, `hits` how often it did."""

    def __init__(self) -> None:
        self.body, self.hits = CHART, 0
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.hits += 1
                if self.path != f"/charts/{ARCHIVE}":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(served.body)))
                self.end_headers()
                self.wfile.write(served.body)

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/charts/{ARCHIVE}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served()
    yield s
    s.httpd.shutdown()


def _helm(argv: list[str], _data: Any) -> tuple[int, str, str]:
    assert argv[:3] in (["helm", "show", "chart"], ["helm", "show", "values"]), argv
    assert Path(argv[3]).read_bytes() == CHART  # helm reads the kept archive, never a partial one
    return 0, CHART_YAML if argv[2] == "chart" else VALUES_YAML, ""


def module(tmp: Path, served: Served, check: bool = False, **over: Any) -> FakeModule:
    params = {"name": "gpu-operator", "url": served.url, "sha256": hashlib.sha256(CHART).hexdigest(),
              "chart_dir": str(tmp / "charts"), "values_dir": str(tmp / "helm"), "show_values": False,
              "timeout": 10} | over  # fmt: skip
    return FakeModule(params, check_mode=check, answer=_helm)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_first_run_makes_the_directories_fetches_keeps_and_reads_the_chart(tmp_path, served):
    m = module(tmp_path, served, show_values=True)
    r = hc.converge(m)
    kept = tmp_path / "charts" / ARCHIVE
    assert r == {"changed": True, "name": "gpu-operator", "path": str(kept), "fetched": True,
                 "metadata": CHART_YAML, "chart_values": VALUES_YAML}  # fmt: skip
    assert kept.read_bytes() == CHART and _mode(kept) == 0o644
    assert (_mode(tmp_path / "charts"), _mode(tmp_path / "helm")) == (0o755, 0o700)
    assert [a[:3] for a in m.ran] == [["helm", "show", "chart"], ["helm", "show", "values"]]
    assert served.hits == 1 and sorted(os.listdir(tmp_path / "charts")) == [ARCHIVE]


def test_a_rerun_fetches_nothing_and_changes_nothing(tmp_path, served):
    hc.converge(module(tmp_path, served))
    m = module(tmp_path, served)
    r = hc.converge(m)
    assert (r["changed"], r["fetched"], r["chart_values"]) == (False, False, None)
    assert served.hits == 1 and [a[:3] for a in m.ran] == [["helm", "show", "chart"]]


def test_a_changed_local_copy_is_fetched_again_and_drifted_modes_are_repaired(tmp_path, served):
    hc.converge(module(tmp_path, served))
    kept = tmp_path / "charts" / ARCHIVE
    kept.write_bytes(b"truncated")
    assert hc.converge(module(tmp_path, served))["fetched"] and kept.read_bytes() == CHART
    kept.chmod(0o600)
    (tmp_path / "helm").chmod(0o755)
    r = hc.converge(module(tmp_path, served))
    assert (r["changed"], r["fetched"]) == (True, False) and served.hits == 2
    assert (_mode(kept), _mode(tmp_path / "helm")) == (0o644, 0o700)


def test_bytes_that_do_not_match_fail_in_get_urls_words_and_are_not_kept(tmp_path, served):
    hc.converge(module(tmp_path, served))
    kept = tmp_path / "charts" / ARCHIVE
    kept.write_bytes(b"an older copy")  # fetched again; what comes is corrupt too
    served.body = CHART[:-1] + b"X"
    want, got = hashlib.sha256(CHART).hexdigest(), hashlib.sha256(served.body).hexdigest()
    m = module(tmp_path, served)
    with pytest.raises(ModuleFailed) as e:
        hc.converge(m)
    assert str(e.value) == f"The checksum for {served.url} did not match {want}; it was {got}."
    assert e.value.result["appliance_failure"] == CHECKSUM_KIND
    assert kept.read_bytes() == b"an older copy" and sorted(os.listdir(tmp_path / "charts")) == [ARCHIVE]
    assert m.ran == []  # helm never read it
    # what `appliance install` makes of it: the checksum kind, the URL named, both digests
    event = {"event": "runner_on_failed", "uuid": "x", "counter": 1, "stdout": "",
             "event_data": {"host": "master1", "task": "Helm | Chart from the bundle, checked and read | gpu-operator",
                            "task_action": "helm_chart", "res": e.value.result}}  # fmt: skip
    [failed] = translate(event)
    assert failed.kind == CHECKSUM_KIND
    found = GET_URL_CHECKSUM.search(failed.message)
    assert found and found.groups() == (served.url, want, got)


def test_check_mode_writes_nothing_and_reads_only_what_is_there(tmp_path, served):
    m = module(tmp_path, served, check=True, show_values=True)
    r = hc.converge(m)
    assert (r["changed"], r["fetched"], r["metadata"], r["chart_values"]) == (True, True, None, None)
    assert not (tmp_path / "charts").exists() and not (tmp_path / "helm").exists()
    assert served.hits == 0 and m.ran == []
    hc.converge(module(tmp_path, served))
    r = hc.converge(module(tmp_path, served, check=True))
    assert (r["changed"], r["metadata"]) == (False, CHART_YAML)


@pytest.mark.parametrize(
    ("over", "words"),
    [
        ({"sha256": "abc"}, r"chart gpu-operator: sha256 'abc' is not a sha256 digest"),
        (
            {"url": "file:///etc/shadow"},
            r"chart gpu-operator: url 'file:///etc/shadow' is not an http\(s\) URL",
        ),
        ({"url": "http://10.77.0.11:8081/charts/..%2F.."}, r"is not a chart archive name"),
        ({"url": "http://10.77.0.11:8081/charts/"}, r"'' is not a chart archive name"),
    ],
)
def test_bad_input_is_refused_naming_the_chart_before_anything_is_written(tmp_path, served, over, words):
    with pytest.raises(ModuleFailed, match=words):
        hc.converge(module(tmp_path, served, **over))
    assert not (tmp_path / "charts").exists() and served.hits == 0


def test_a_chart_the_server_does_not_have_fails_naming_it_and_the_url(tmp_path, served):
    url = served.url.replace(ARCHIVE, "hami-2.4.1.tgz")
    with pytest.raises(OSError, match="HTTP Error 404"):
        hc.converge(module(tmp_path, served, url=url))  # main() turns it into one line naming both
    assert not (tmp_path / "charts" / "hami-2.4.1.tgz").exists()
