"""The install service against a fake runner port: inventory rendered, host keys required,
failures turned into one line naming host and task, with the artifact directory as hint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from appliance_cli.core.install import install
from appliance_cli.core.siteconfig import load_site
from appliance_cli.errors import ConfigError, RunFailed
from appliance_cli.runner.events import HostResult, HostStats, RunOptions, RunRequest, RunResult

REPO = Path(__file__).resolve().parents[2]


class FakeRunner:
    def __init__(self, result: RunResult | None = None):
        self.requests: list[RunRequest] = []
        self.result = result

    def run(self, req, on_event):
        self.requests.append(req)
        on_event(HostResult("master1", "t", "ok"))
        return self.result or RunResult("successful", 0, {"master1": HostStats(ok=1)}, req.private_data_dir)


@pytest.fixture
def site(tmp_path: Path):
    shutil.copy(REPO / "inventories" / "example" / "appliance.yml", tmp_path / "appliance.yml")
    cfg = load_site(tmp_path)
    (tmp_path / "known_hosts").write_text(
        "".join(f"{n.name},{n.address} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake\n" for n in cfg.nodes)
    )
    return cfg


def test_install_renders_inventory_and_runs_site_playbook(site):
    runner = FakeRunner()
    events = []
    result = install(runner, site, RunOptions(check=True, limit="gpu1"), events.append)
    assert result.ok and events
    [req] = runner.requests
    assert req.playbook.name == "site.yml" and req.options.check and req.options.limit == "gpu1"
    hosts = yaml.safe_load(req.inventory.read_text())
    assert hosts["all"]["hosts"]["gpu2"]["ansible_host"] == "192.168.10.22"
    assert set(hosts["all"]["children"]["appliance"]["children"]["gpu_workers"]["hosts"]) == {"gpu1", "gpu2"}
    gv = yaml.safe_load((site.site_dir / "group_vars" / "all" / "00-site.yml").read_text())
    assert gv["appliance_pod_cidr"] == "10.244.0.0/16"
    assert "StrictHostKeyChecking=yes" in gv["ansible_ssh_common_args"]
    assert req.private_data_dir.parent == site.site_dir / "runs"


def test_install_refuses_nodes_without_recorded_host_key(site):
    (site.site_dir / "known_hosts").write_text("master1,192.168.10.11 ssh-ed25519 AAAA\n")
    with pytest.raises(ConfigError) as exc:
        install(FakeRunner(), site, RunOptions(), lambda e: None)
    assert "no SSH host key recorded for gpu1, gpu2" in exc.value.message
    assert "appliance hosts trust" in exc.value.hint


def test_failed_run_names_host_task_and_artifacts(site, tmp_path):
    failed = RunResult(
        "failed",
        2,
        {},
        tmp_path / "artifacts",
        failures=[HostResult("gpu2", "Packages | Install", "failed", "No package matching 'socat'")],
    )
    with pytest.raises(RunFailed) as exc:
        install(FakeRunner(failed), site, RunOptions(), lambda e: None)
    assert exc.value.message == "gpu2: task 'Packages | Install' failed: No package matching 'socat'"
    assert str(tmp_path / "artifacts") in exc.value.hint


def test_an_unreachable_node_is_named_once_first_with_its_address(site, tmp_path):
    cause = "no route to host: the node is down or the network path to it is broken"
    failed = RunResult(
        "failed",
        2,
        {},
        tmp_path / "artifacts",
        failures=[
            HostResult("master1", "Registry | Pull check", "failed", "pull failed"),
            HostResult("gpu2", "Gathering Facts", "unreachable", cause, address="192.168.10.22"),
            HostResult("gpu2", "Join | Token", "unreachable", cause, address="192.168.10.22"),
        ],
    )
    with pytest.raises(RunFailed) as exc:
        install(FakeRunner(failed), site, RunOptions(), lambda e: None)
    assert exc.value.message == f"gpu2 (192.168.10.22) unreachable: {cause} (task 'Gathering Facts')"


def test_a_run_that_only_lost_nodes_is_exit_7_with_the_limited_rerun(site, tmp_path):
    """Every failure is a node that stopped answering: the other nodes ran to the end, so the run
    is Unreachable (exit 7), and the hint is the install limited to the lost nodes."""
    from appliance_cli.errors import Unreachable

    cause = "SSH connection lost: no answer to keepalives"
    failed = RunResult("failed", 2, {}, tmp_path / "artifacts", failures=[
        HostResult("gpu2", "Containerd | Write config.toml", "unreachable", cause, address="192.168.10.22"),
        HostResult("gpu1", "Containerd | Write config.toml", "unreachable", cause, address="192.168.10.21"),
        HostResult("gpu2", "Kube binaries | Enable kubelet", "unreachable", cause, address="192.168.10.22"),
    ])  # fmt: skip
    with pytest.raises(Unreachable) as exc:
        install(FakeRunner(failed), site, RunOptions(), lambda e: None)
    assert exc.value.exit_code == 7
    assert exc.value.message == (
        f"gpu2 (192.168.10.22) unreachable: {cause} (task 'Containerd | Write config.toml') (+1 more unreachable: gpu1)"
    )
    assert exc.value.hint.startswith(
        f"the other nodes finished; once gpu2, gpu1 answer SSH again, appliance install --site {site.site_dir} "
        "--limit gpu2,gpu1 brings them up to date (artifacts and full log: "
    )


def test_the_runner_is_told_which_node_has_which_address(site):
    runner = FakeRunner()
    install(runner, site, RunOptions(), lambda e: None)
    assert runner.requests[0].node_names == {n.address: n.name for n in site.nodes}


def test_a_connection_lost_under_a_delegated_task_names_the_node_that_went_silent(
    site, tmp_path, monkeypatch
):
    """Ansible reports a connection that died under a delegated task on the node that delegated
    it, with no address: the service asks every node over SSH (faked here: no network) and names
    the one that no longer answers."""
    from appliance_cli.core import install as service
    from appliance_cli.errors import Unreachable
    from appliance_cli.runner.translate import LOST_MID_RUN

    asked = []

    def fake_run_on(cfg, node, command, timeout=60):
        asked.append(node.name)
        if node.name == "gpu1":
            raise Unreachable(f"{node.name}: no answer within {timeout}s")
        return ""

    monkeypatch.setattr(service, "run_on", fake_run_on)
    lost = f"{LOST_MID_RUN} (Task failed: the respondent Context has disconnected)"
    failed = RunResult("failed", 2, {}, tmp_path / "artifacts",
                       failures=[HostResult("master1", "Helm | Pull the images ahead on gpu1", "unreachable", lost)])  # fmt: skip
    with pytest.raises(Unreachable) as exc:
        install(FakeRunner(failed), site, RunOptions(), lambda e: None)
    assert sorted(asked) == ["gpu1", "gpu2", "master1"]
    assert exc.value.message == (
        f"gpu1 (192.168.10.21) unreachable: {lost} (task 'Helm | Pull the images ahead on gpu1' on master1; "
        "it does not answer SSH now)"
    )


def test_an_unreachable_no_log_task_names_the_node_that_went_silent(site, tmp_path, monkeypatch):
    """A no_log task delegated to a worker whose cable was pulled: Ansible reports it on the master,
    censored, with no address (translate leaves it empty); the node that does not answer is named."""
    from appliance_cli.core import install as service
    from appliance_cli.errors import Unreachable

    def fake_run_on(cfg, node, command, timeout=60):
        if node.name == "gpu1":
            raise Unreachable(f"{node.name}: no answer within {timeout}s")
        return ""

    monkeypatch.setattr(service, "run_on", fake_run_on)
    hidden = "the task's output is hidden (no_log), ssh's words with it"
    failed = RunResult("failed", 2, {}, tmp_path / "artifacts",
                       failures=[HostResult("master1", "Verify | Pull from gpu1", "unreachable", hidden)])  # fmt: skip
    with pytest.raises(Unreachable) as exc:
        install(FakeRunner(failed), site, RunOptions(), lambda e: None)
    assert exc.value.message == (
        f"gpu1 (192.168.10.21) unreachable: {hidden} (task 'Verify | Pull from gpu1' on master1; "
        "it does not answer SSH now)"
    )
