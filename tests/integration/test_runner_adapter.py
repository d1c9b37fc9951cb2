"""The runner adapter with real ansible-runner and ansible-core, against localhost."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from appliance_cli.runner.adapter import AnsibleRunner
from appliance_cli.runner.events import HostResult, HostWarning, RunOptions, RunRequest, TaskStarted

pytestmark = pytest.mark.integration

PLAYBOOK = """---
- name: Probe
  hosts: all
  gather_facts: false
  tasks:
    - name: Probe | Write a file
      ansible.builtin.copy:
        dest: "{{ target }}"
        content: "hello\\n"
        mode: "0644"
    - name: Probe | Secret stays out of events
      ansible.builtin.command: echo s3cr3t-token
      no_log: true
      changed_when: false
    - name: Probe | Tell what this node cannot do
      ansible.builtin.debug:
        var: appliance_warnings
      vars:
        appliance_warnings: ["cannot do X here"]
    - name: Probe | Fail on demand
      ansible.builtin.fail:
        msg: "asked to fail"
      when: fail | default(false) | bool
"""


def _request(tmp_path: Path, **kw) -> RunRequest:
    pb = tmp_path / "probe.yml"
    pb.write_text(PLAYBOOK)
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    extravars = {"target": str(tmp_path / "out.txt")} | kw.pop("extravars", {})
    return RunRequest(
        playbook=pb, inventory=inv, private_data_dir=tmp_path / "runs" / "r1", extravars=extravars, **kw
    )


def test_events_stats_and_idempotence(tmp_path):
    events: list = []
    first = AnsibleRunner().run(_request(tmp_path), events.append)
    assert first.ok and first.stats["localhost"].changed == 1
    assert TaskStarted("Probe | Write a file", None) in events or any(
        isinstance(e, TaskStarted) and e.name == "Probe | Write a file" for e in events
    )
    assert [w for w in events if isinstance(w, HostWarning)] == [HostWarning("localhost", "cannot do X here")]
    assert first.artifact_dir.is_dir()
    # no_log output never reaches the artifacts
    blob = "".join(p.read_text() for p in first.artifact_dir.rglob("*") if p.is_file())
    assert "s3cr3t-token" not in blob
    # every callback the runner enables was found and loaded (appliance_jinja_warm among them)
    assert "Skipping callback" not in blob and "unable to load" not in blob

    second = AnsibleRunner().run(_request(tmp_path), lambda e: None)
    assert second.ok and second.changed_total == 0


def test_check_mode_changes_nothing(tmp_path):
    result = AnsibleRunner().run(
        _request(tmp_path, options=RunOptions(check=True, diff=True)), lambda e: None
    )
    assert result.ok and not (tmp_path / "out.txt").exists()


def test_failure_names_host_and_task(tmp_path):
    events: list = []
    result = AnsibleRunner().run(_request(tmp_path, extravars={"fail": True}), events.append)
    assert not result.ok and result.status == "failed"
    assert result.failures == [HostResult("localhost", "Probe | Fail on demand", "failed", "asked to fail")]
    assert any(isinstance(e, HostResult) and e.status == "failed" for e in events)


def test_each_site_gets_its_own_ssh_control_sockets(tmp_path):
    """ssh names a ControlPersist socket after user@host:port only: two sites (or labs) reusing the
    same node addresses must never share one, or a run would act on the other site's nodes."""
    from appliance_cli.runner.adapter import _envvars

    def env(site: Path) -> dict[str, str]:
        site.mkdir(parents=True, exist_ok=True)
        return _envvars(
            RunRequest(
                playbook=site / "p.yml", inventory=site / "hosts.yml", private_data_dir=site / "runs/x"
            )
        )

    a, b = env(tmp_path / "lab-a/site"), env(tmp_path / "lab-b/site")
    assert a["ANSIBLE_SSH_CONTROL_PATH_DIR"] != b["ANSIBLE_SSH_CONTROL_PATH_DIR"]
    assert env(tmp_path / "lab-a/site")["ANSIBLE_SSH_CONTROL_PATH_DIR"] == a["ANSIBLE_SSH_CONTROL_PATH_DIR"]
    assert len(a["ANSIBLE_SSH_CONTROL_PATH_DIR"]) + 1 + 40 < 108  # + %C (40 hex): unix socket limit


WHO_RUNS_MODULES = """---
- name: Who runs the modules
  hosts: all
  gather_facts: false
  tasks:
    - name: Probe | Command line of the process that ran this module
      ansible.builtin.shell: tr '\\\\0' ' ' < /proc/$PPID/cmdline
      register: parent
      changed_when: false
    - name: Probe | Report the parent
      ansible.builtin.debug:
        var: appliance_warnings
      vars:
        appliance_warnings: ["parent: {{ parent.stdout }}"]
"""


@pytest.mark.parametrize("mitogen", [True, False])
def test_mitogen_runs_the_modules_when_asked(tmp_path, mitogen):
    """With mitogen the module runs inside Mitogen's persistent interpreter (its process title says
    so); without it, in a fresh AnsiballZ process."""
    req = _request(tmp_path, mitogen=mitogen)
    req.playbook.write_text(WHO_RUNS_MODULES)
    events: list = []
    result = AnsibleRunner().run(req, events.append)
    assert result.ok
    [parent] = [w.message for w in events if isinstance(w, HostWarning)]
    assert ("(mitogen:" in parent) is mitogen, parent
    assert ("AnsiballZ_command" in parent) is not mitogen, parent


def test_missing_mitogen_is_a_prerequisite_error_with_the_way_out(tmp_path, monkeypatch):
    import importlib.util

    from appliance_cli.errors import PrerequisiteError
    from appliance_cli.runner import adapter

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ansible_mitogen" else real(name, *a)
    )
    with pytest.raises(PrerequisiteError) as err:
        adapter._envvars(_request(tmp_path, mitogen=True))
    assert "ansible_mitogen" in err.value.message and "ssh.mitogen: false" in err.value.hint


DELEGATING = """---
- name: Delegates
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Probe | Ask the other node
      ansible.builtin.command: "true"
      delegate_to: ghost
      loop: [1]
      changed_when: false
"""


def test_an_unreachable_delegation_target_is_named_not_the_node_that_delegated(tmp_path):
    """A task on localhost delegated to a node whose SSH port is closed: the result names that
    node, ssh's cause in plain words, and its address (the real ansible-runner event stream)."""
    pb = tmp_path / "delegating.yml"
    pb.write_text(DELEGATING)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        f"ghost ansible_host=127.0.0.9 ansible_port={port} ansible_user=root\n"
    )
    req = RunRequest(playbook=pb, inventory=inv, private_data_dir=tmp_path / "runs" / "r1",
                     node_names={"127.0.0.9": "ghost"})  # fmt: skip
    result = AnsibleRunner().run(req, lambda e: None)
    assert not result.ok
    [f] = result.failures
    assert (f.host, f.status, f.address) == ("ghost", "unreachable", "127.0.0.9")
    assert f.message.startswith("connection refused: the node answers but nothing listens")
