"""kube_binaries' kube_versions_recorded module (roles/kube_binaries/library/), driven with the
binaries' answers stubbed: what a dry run does (asks, writes nothing; skips while the binaries of
this run are not installed yet), an unreadable record, and a binary that does not answer.
tests/integration/test_k8s_templates.py runs it through a real playbook with fake binaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._support.modules import FakeModule, ModuleFailed, load_role_module

m = load_role_module("kube_binaries", "kube_versions_recorded")

ANSWERS = {
    "kubeadm": "v1.23.17\n",
    "kubelet": "Kubernetes v1.23.17\n",
    "kubectl": json.dumps({"clientVersion": {"gitVersion": "v1.23.17"}}),
    "crictl": "crictl version v1.23.0\n",
}
TOOLS = ["kubeadm", "kubelet", "kubectl"]


def _module(record: Path, check: bool = False, reinstalled: bool = False, rc: int = 0) -> FakeModule:
    def answer(argv: list[str], _data: Any) -> tuple[int, str, str]:
        return (rc, ANSWERS[argv[0]], "" if rc == 0 else "exec format error")

    params = {
        "record": str(record), "tools": TOOLS, "kubernetes": "v1.23.17", "cni_version": "v1.1.1",
        "declared": dict.fromkeys(TOOLS, "v1.23.17"), "bundled_for": dict.fromkeys(TOOLS, "v1.23.17"),
        "reinstalled": reinstalled,
    }  # fmt: skip
    return FakeModule(params, check_mode=check, answer=answer)


def test_a_dry_run_asks_and_writes_nothing(tmp_path: Path) -> None:
    record = tmp_path / "facts.d" / "appliance_kube.fact"
    out = m.converge(_module(record, check=True))
    assert out["changed"] and out["probed"] and out["versions"]["crictl"] == "v1.23.0"
    assert not record.parent.exists()


def test_a_dry_run_before_this_runs_binaries_are_installed_asks_nothing(tmp_path: Path) -> None:
    mod = _module(tmp_path / "appliance_kube.fact", check=True, reinstalled=True)
    assert m.converge(mod) == {"changed": False, "probed": False, "versions": {}}
    assert mod.ran == []


@pytest.mark.parametrize("text", ["not json", "[1, 2]", "\xff"])
def test_an_unreadable_record_is_asked_again_and_rewritten(tmp_path: Path, text: str) -> None:
    record = tmp_path / "appliance_kube.fact"
    record.write_text(text, encoding="latin-1")
    out = m.converge(_module(record))
    assert out["changed"] and out["probed"]
    assert json.loads(record.read_text())["kubectl"] == "v1.23.17"


def test_a_binary_that_does_not_answer_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModuleFailed) as e:
        m.converge(_module(tmp_path / "appliance_kube.fact", rc=126))
    assert str(e.value) == "kubeadm version -o short failed (rc 126): exec format error"
