"""core/nodeops.py's commands on the node itself (is it joined, does it answer, kubeadm reset):
argv each, the node's answer checked; run_on is replaced, no SSH."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance_cli.core import nodeops
from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.errors import ApplianceError, Unreachable

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "appliance.yml"


@pytest.fixture
def cfg(tmp_path: Path) -> SiteConfig:
    (tmp_path / "appliance.yml").write_text(EXAMPLE.read_text())
    return load_site(tmp_path / "appliance.yml")


def _node(monkeypatch: pytest.MonkeyPatch, answer: str | Exception) -> list[tuple[list[str], int]]:
    asked: list[tuple[list[str], int]] = []

    def run_on(cfg, node, command, timeout=60):  # type: ignore[no-untyped-def]
        asked.append((command, timeout))
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(nodeops, "run_on", run_on)
    return asked


def test_joined_is_asked_with_the_path_as_an_argument_and_its_answer_checked(cfg, monkeypatch) -> None:
    gpu1 = cfg.node("gpu1")
    asked = _node(monkeypatch, "joined\n")
    assert nodeops.joined(cfg, gpu1) is True
    assert asked[0][0][-1] == nodeops.KUBELET_CONF and asked[0][0][:2] == ["sh", "-c"]
    _node(monkeypatch, "not-joined\n")
    assert nodeops.joined(cfg, gpu1) is False
    _node(monkeypatch, "sh: 1: test: oops\n")
    with pytest.raises(
        ApplianceError, match=r"^gpu1: unexpected answer to `test -f /etc/kubernetes/kubelet\.conf`"
    ):
        nodeops.joined(cfg, gpu1)


def test_reset_and_silence(cfg, monkeypatch) -> None:
    gpu1 = cfg.node("gpu1")
    asked = _node(monkeypatch, "")
    nodeops.reset(cfg, gpu1)
    assert asked == [(["kubeadm", "reset", "-f"], nodeops.RESET_TIMEOUT)]
    assert nodeops.silence(cfg, gpu1) == ""
    _node(monkeypatch, Unreachable("gpu1 (10.0.0.1): SSH cannot connect: No route to host"))
    assert nodeops.silence(cfg, gpu1) == "gpu1 (10.0.0.1): SSH cannot connect: No route to host"
