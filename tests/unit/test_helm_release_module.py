"""The helm role's helm_release module (roles/helm/library/helm_release.py): one task that keeps a
release's values on the master, reads the deployed release and runs `helm upgrade --install` only
when it differs. Driven through its converge() with helm answered by a recorded script."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible.plugins.filter.core import to_nice_yaml

from tests._support import modules
from tests._support.modules import ModuleFailed, load_role_module

hr = load_role_module("helm", "helm_release")

VALUES = {
    "driver": {"enabled": False, "version": "550.90.07"},
    "toolkit": {"env": [{"name": "A", "value": "1"}]},
}


class FakeModule(modules.FakeModule):
    """helm answers from `deployed` (None: not installed) and `deployed_values`."""

    def __init__(
        self,
        tmp: Path,
        *,
        values=VALUES,
        deployed=None,
        deployed_values=None,
        check=False,
        name="gpu-operator",
    ):
        params: dict[str, Any] = {
            "name": name, "namespace": "gpu-operator", "chart_path": "/var/lib/appliance/charts/gpu-operator-v23.9.1.tgz",
            "values": values, "values_text": to_nice_yaml(values, indent=2), "values_file": str(tmp / f"{name}.values.yaml"), "kubeconfig": "/etc/kubernetes/admin.conf",
            "timeout": 600,
        }  # fmt: skip
        super().__init__(params, check_mode=check, answer=self._helm)
        self.deployed, self.deployed_values = deployed, deployed_values

    def _helm(self, argv, _data):
        verb = argv[5]
        if verb == "list":
            return 0, json.dumps([self.deployed] if self.deployed else []), ""
        if verb == "get":
            return 0, json.dumps(self.deployed_values), ""
        if verb == "upgrade":
            return 0, "Release has been upgraded.", ""
        raise AssertionError(argv)


def _upgrades(m: FakeModule) -> list[list[str]]:
    return [c for c in m.ran if c[5] == "upgrade"]


def test_first_install_keeps_the_values_0600_and_installs(tmp_path):
    m = FakeModule(tmp_path)
    result = hr.converge(m)
    assert result["changed"] and result["reason"] == "not deployed" and result["values_changed"]
    kept = Path(m.params["values_file"])
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and kept.stat().st_uid == 0
    assert kept.read_text() == to_nice_yaml(VALUES, indent=2)
    assert _upgrades(m) == [[
        "helm", "--kubeconfig", "/etc/kubernetes/admin.conf", "-n", "gpu-operator", "upgrade", "--install",
        "gpu-operator", "/var/lib/appliance/charts/gpu-operator-v23.9.1.tgz", "--create-namespace",
        "-f", str(kept), "--timeout", "600s",
    ]]  # fmt: skip
    assert not list(tmp_path.glob(".helm-values.*")), "a temporary file was left"


def test_a_release_as_wanted_is_left_alone(tmp_path):
    deployed = {"name": "gpu-operator", "status": "deployed", "chart": "gpu-operator-v23.9.1"}
    m = FakeModule(tmp_path, deployed=deployed, deployed_values=VALUES)
    hr.converge(m)  # writes the values file
    m = FakeModule(tmp_path, deployed=deployed, deployed_values=VALUES)
    result = hr.converge(m)
    assert result == {"changed": False, "reason": "", "values_changed": False}
    assert _upgrades(m) == []


@pytest.mark.parametrize(
    ("deployed", "deployed_values", "reason"),
    [
        (
            {"name": "gpu-operator", "status": "failed", "chart": "gpu-operator-v23.9.1"},
            VALUES,
            "status failed",
        ),
        (
            {"name": "gpu-operator", "status": "deployed", "chart": "gpu-operator-v23.3.2"},
            VALUES,
            "chart gpu-operator-v23.3.2 deployed, gpu-operator-v23.9.1 wanted",
        ),
        (
            {"name": "gpu-operator", "status": "deployed", "chart": "gpu-operator-v23.9.1"},
            {"driver": {}},
            "other values deployed",
        ),
        (
            {"name": "gpu-operator", "status": "deployed", "chart": "gpu-operator-v23.9.1"},
            None,
            "other values deployed",
        ),
    ],
)
def test_each_difference_upgrades_and_says_why(tmp_path, deployed, deployed_values, reason):
    m = FakeModule(tmp_path, deployed=deployed, deployed_values=deployed_values)
    result = hr.converge(m)
    assert result["changed"] and result["reason"] == reason
    assert len(_upgrades(m)) == 1


def test_check_mode_reads_but_writes_and_upgrades_nothing(tmp_path):
    m = FakeModule(tmp_path, check=True)
    result = hr.converge(m)
    assert result["changed"] and result["reason"] == "not deployed"
    assert result["diff"]["after"] == to_nice_yaml(VALUES, indent=2) and result["diff"]["before"] == ""
    assert not os.path.exists(m.params["values_file"])
    assert _upgrades(m) == [] and [c[5] for c in m.ran] == ["list"]


def test_a_kept_file_with_loose_permissions_is_rewritten(tmp_path):
    deployed = {"name": "gpu-operator", "status": "deployed", "chart": "gpu-operator-v23.9.1"}
    hr.converge(FakeModule(tmp_path, deployed=deployed, deployed_values=VALUES))
    kept = Path(tmp_path / "gpu-operator.values.yaml")
    kept.chmod(0o644)
    result = hr.converge(FakeModule(tmp_path, deployed=deployed, deployed_values=VALUES))
    assert result["values_changed"] and not result["reason"]
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600


@pytest.mark.parametrize("name", ["GPU-operator", "a" * 54, "x;reboot", "-x"])
def test_a_release_name_helm_would_refuse_fails_naming_it(tmp_path, name):
    with pytest.raises(ModuleFailed, match=r"helm release name .* is not a DNS-1123 label"):
        hr.converge(FakeModule(tmp_path, name=name))


def test_a_helm_failure_is_one_line_with_helms_words(tmp_path):
    m = FakeModule(tmp_path)
    m.run_command = lambda argv: (1, "", "Error: Kubernetes cluster unreachable: connection refused\n")
    with pytest.raises(
        ModuleFailed, match=r"^helm list failed \(rc 1\): Error: Kubernetes cluster unreachable"
    ):
        hr.converge(m)


# ---- against the stand-in helm: a release a killed helm left pending ---------------------------


class Killed(Exception):
    """The stand-in helm stopped right after it recorded the new revision as pending."""


def _live(tmp: Path, cluster, chart: Path, values: dict) -> modules.FakeModule:
    """The module with its helm calls run by the stand-in helm against `cluster`."""
    import contextlib
    import io

    from tests.standin.k8s_standin.entry import main

    def answer(argv: list[str], _data: Any) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["/usr/local/bin/helm", f"--kubeconfig={cluster.kubeconfig}", *argv[3:]])
        return rc, out.getvalue(), err.getvalue()

    params = {"name": "x", "namespace": "default", "chart_path": str(chart), "values": values,
              "values_text": to_nice_yaml(values, indent=2), "values_file": str(tmp / "x.values.yaml"),
              "kubeconfig": "/etc/kubernetes/admin.conf", "timeout": 60}  # fmt: skip
    return modules.FakeModule(params, answer=answer)


def _kill_after_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next stand-in helm write after a pending record is where helm is killed."""
    from tests.standin.k8s_standin import helm as standin

    real = standin.Helm._write

    def write(self, rel: dict, create: bool) -> None:
        real(self, rel, create)
        if rel["info"]["status"].startswith("pending-"):
            monkeypatch.setattr(standin.Helm, "_write", real)
            raise Killed(rel["info"]["status"])

    monkeypatch.setattr(standin.Helm, "_write", write)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Any]:
    """The stand-in API server the stand-in helm records releases in."""
    from tests._support.standin_cluster import Cluster

    c = Cluster(tmp_path)
    yield c
    c.srv.shutdown()


def test_a_release_a_killed_helm_left_pending_is_rolled_back_then_upgraded(
    tmp_path: Path, cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit.test_standin_helm import _chart

    chart = _chart(tmp_path, "x")
    assert hr.converge(_live(tmp_path, cluster, chart, {"replicas": 1}))["reason"] == "not deployed"
    _kill_after_pending(monkeypatch)
    with pytest.raises(Killed, match="pending-upgrade"):
        hr.converge(_live(tmp_path, cluster, chart, {"replicas": 2}))
    m = _live(tmp_path, cluster, chart, {"replicas": 2})
    rc, _, err = m.run_command(["helm", "--kubeconfig", "k", "upgrade", "--install", "x", str(chart)])
    assert rc == 1 and "another operation (install/upgrade/rollback) is in progress" in err  # helm's refusal
    result = hr.converge(m)
    assert (
        result["changed"]
        and result["reason"] == "status pending-upgrade, rolled back (a helm was killed mid-way)"
    )
    assert [c[5] for c in m.ran[1:]] == ["list", "rollback", "get", "upgrade"]
    listed = json.loads(m.run_command(["helm", "--kubeconfig", "k", "list", "-o", "json"])[1])
    assert [(r["name"], r["revision"], r["status"]) for r in listed] == [("x", "4", "deployed")]
    values = json.loads(m.run_command(["helm", "--kubeconfig", "k", "get", "values", "x", "-o", "json"])[1])
    assert values == {"replicas": 2}
    assert hr.converge(_live(tmp_path, cluster, chart, {"replicas": 2}))["changed"] is False


def test_an_install_a_killed_helm_left_pending_is_uninstalled_then_installed(
    tmp_path: Path, cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit.test_standin_helm import _chart

    chart = _chart(tmp_path, "x")
    _kill_after_pending(monkeypatch)
    with pytest.raises(Killed, match="pending-install"):
        hr.converge(_live(tmp_path, cluster, chart, {"replicas": 1}))
    m = _live(tmp_path, cluster, chart, {"replicas": 1})
    check = _live(tmp_path, cluster, chart, {"replicas": 1})
    check.check_mode = True
    assert hr.converge(check)["reason"] == "status pending-install"  # check mode: said, not done
    assert [c[5] for c in check.ran] == ["list", "get"]
    result = hr.converge(m)
    assert result["reason"] == "not deployed" and [c[5] for c in m.ran] == [
        "list",
        "uninstall",
        "upgrade",
    ]
    listed = json.loads(m.run_command(["helm", "--kubeconfig", "k", "list", "-o", "json"])[1])
    assert [(r["revision"], r["status"]) for r in listed] == [("1", "deployed")]
