"""The runner adapter's translation of recorded ansible-runner job events into domain events."""

from __future__ import annotations

from appliance_cli.runner.events import HostResult, HostWarning, PlayStarted, TaskStarted
from appliance_cli.runner.translate import stats_from_event, translate


def ev(kind: str, **data) -> dict:
    return {"event": kind, "uuid": "x", "counter": 1, "stdout": "", "event_data": data}


def test_play_and_task_start():
    assert translate(ev("playbook_on_play_start", play="Operating-system prerequisites")) == [
        PlayStarted("Operating-system prerequisites")
    ]
    assert translate(ev("playbook_on_task_start", task="Swap | Turn swap off now", role="os_prereqs")) == [
        TaskStarted("Swap | Turn swap off now", "os_prereqs")
    ]


def test_ok_changed_failed_unreachable_skipped():
    ok = translate(ev("runner_on_ok", host="w1", task="t", res={"changed": False}))
    changed = translate(ev("runner_on_ok", host="w1", task="t", res={"changed": True}))
    failed = translate(
        ev(
            "runner_on_failed",
            host="w2",
            task="Packages | Install",
            res={"msg": "No package matching 'socat' is available"},
        )
    )
    unreachable = translate(
        ev(
            "runner_on_unreachable",
            host="w3",
            task="Gathering Facts",
            res={"msg": "Failed to connect to the host via ssh: Host key verification failed."},
        )
    )
    skipped = translate(ev("runner_on_skipped", host="w1", task="t"))
    assert [e.status for e in ok + changed + failed + unreachable + skipped] == [
        "ok",
        "changed",
        "failed",
        "unreachable",
        "skipped",
    ]
    assert failed[0] == HostResult(
        "w2", "Packages | Install", "failed", "No package matching 'socat' is available"
    )
    assert "Host key verification failed" in unreachable[0].message


def test_failed_command_message_is_last_stderr_line():
    [r] = translate(
        ev(
            "runner_on_failed",
            host="m",
            task="kubeadm",
            res={
                "stderr": "line one\n[ERROR Swap]: running with swap on is not supported. Please disable swap",
                "rc": 1,
            },
        )
    )
    assert r.message == "[ERROR Swap]: running with swap on is not supported. Please disable swap"


def test_failed_no_log_task_says_its_details_are_hidden_not_no_message():
    censored = "the output has been hidden due to the fact that 'no_log: true' was specified for this result"
    [r] = translate(
        ev(
            "runner_on_failed",
            host="m",
            task="Auth | Pull password",
            res={"censored": censored, "changed": False},
        )
    )
    assert r.status == "failed" and "hidden" in r.message and "no_log" in r.message


def test_failed_loop_names_the_first_failed_item_and_its_reason():
    [r] = translate(
        ev(
            "runner_on_failed",
            host="m",
            task="Ask the tools",
            res={
                "msg": "One or more items failed",
                "results": [
                    {"failed": False, "_ansible_item_label": "kubeadm", "rc": 0},
                    {
                        "failed": True,
                        "_ansible_item_label": "kubelet",
                        "rc": 1,
                        "stderr": "x\nNo module named 'yaml'",
                    },
                    {"failed": True, "_ansible_item_label": "crictl", "rc": 1, "stderr": "boom"},
                ],
            },
        )
    )
    assert r.message == "item kubelet: No module named 'yaml' (+1 more items)"


def test_ignored_failure_is_flagged():
    [r] = translate(ev("runner_on_failed", host="m", task="t", ignore_errors=True, res={"msg": "x"}))
    assert r.ignored


def test_results_carrying_appliance_warnings_become_warnings():
    # a job event as kernel_prereqs' task sends it on a container node (changed: it set other sysctls)
    events = translate(
        ev(
            "runner_on_ok",
            host="worker1",
            task="Kernel | Swap off, modules loaded, parameters set (now and at boot)",
            res={
                "changed": True,
                "sysctls_set": ["net.ipv4.ip_forward=1"],
                "appliance_warnings": [
                    "sysctl fs.inotify.max_user_watches=524288 cannot be set in this systemd-nspawn node",
                    "kernel module x",
                ],
            },
        )
    )
    assert events[0].status == "changed"
    assert events[1:] == [
        HostWarning(
            "worker1", "sysctl fs.inotify.max_user_watches=524288 cannot be set in this systemd-nspawn node"
        ),
        HostWarning("worker1", "kernel module x"),
    ]


def test_loop_items_carry_warnings_too_and_names_do_not_matter():
    events = translate(
        ev(
            "runner_on_ok",
            host="w1",
            task="Anything",
            res={"results": [{"appliance_warnings": ["a"]}, {"changed": False}, {"appliance_warnings": "b"}]},
        )
    )
    assert events[1:] == [HostWarning("w1", "a"), HostWarning("w1", "b")]
    # the old convention, a task name, carries nothing any more: only the result's key does
    named = translate(ev("runner_on_ok", host="w1", task="OS prereqs | Report limits", res={"msg": ["x"]}))
    assert [e for e in named if isinstance(e, HostWarning)] == []


def test_failed_and_skipped_results_give_no_warnings():
    res = {"msg": "boom", "appliance_warnings": ["a"]}
    assert [type(e) for e in translate(ev("runner_on_failed", host="w1", task="t", res=res))] == [HostResult]
    assert [type(e) for e in translate(ev("runner_on_skipped", host="w1", task="t", res=res))] == [HostResult]


def test_unrelated_events_are_ignored_and_stats_are_read():
    assert translate(ev("verbose")) == []
    stats = stats_from_event(
        ev(
            "playbook_on_stats",
            ok={"m": 10, "w": 9},
            changed={"m": 2},
            failures={"w": 1},
            dark={},
            skipped={"w": 3},
        )
    )
    assert stats["m"].ok == 10 and stats["m"].changed == 2 and stats["m"].failed == 0
    assert stats["w"].failed == 1 and stats["w"].skipped == 3
    assert stats_from_event(ev("runner_on_ok")) is None


def _run_failing_install(failed, cfg, tmp_path, monkeypatch) -> None:
    """install.run_playbook over a runner whose run failed with `failed` (host keys and inventory faked)."""
    from appliance_cli.core import install
    from appliance_cli.runner.events import RunOptions, RunResult

    class Runner:
        def run(self, req, on_event):
            return RunResult("failed", 2, {}, tmp_path, failures=list(failed))

    monkeypatch.setattr(install, "require_host_keys", lambda cfg: None)
    monkeypatch.setattr(
        install, "render_inventory", lambda cfg: type("I", (), {"hosts_file": tmp_path / "h"})()
    )
    install.run_playbook(Runner(), cfg, "site.yml", RunOptions(), lambda ev: None)


def test_a_bad_stick_found_while_copying_is_a_bundle_error_exit_4(tmp_path, monkeypatch):
    """bundle_sync marks its failure appliance_failure=bundle; the install reports it as the bundle
    problem it is (exit 4, with the bundle hint), not as a generic failed run (exit 5)."""
    import pytest

    from appliance_cli.errors import BundleError

    failed = translate(ev("runner_on_failed", host="master1", task="Sync | Copy and verify the bundle",
                          res={"msg": "1 bad blob(s) in /media/x, bundle not copied: sha256:ab (apt-repo/x): "
                               "content does not match its digest (corrupt)", "appliance_failure": "bundle"}))  # fmt: skip
    assert failed[0].kind == "bundle"
    assert (
        translate(ev("runner_on_ok", host="m", task="t", res={"appliance_failure": "bundle"}))[0].kind == ""
    )

    cfg = type("C", (), {"nodes": [], "site_dir": tmp_path, "ssh": type("S", (), {"mitogen": False})()})()
    with pytest.raises(
        BundleError, match=r"master1: task 'Sync \| Copy and verify the bundle' failed: .*\(apt-repo/x\)"
    ) as e:
        _run_failing_install(failed, cfg, tmp_path, monkeypatch)
    assert e.value.exit_code == 4 and "nothing was installed" in (e.value.hint or "")


def test_a_blob_of_the_masters_copy_changed_since_verified_is_a_bundle_error_exit_4(tmp_path, monkeypatch):
    """bundle_sync's appliance_failure=bundle-copy: exit 4 with the line naming the file, and a hint
    about the master's copy (not the stick's)."""
    import pytest

    from appliance_cli.errors import BundleError

    path = "/srv/appliance/bundle/blobs/sha256/" + "a" * 64
    msg = (f"{path}: blob sha256:{'a' * 64} (helm-chart/gpu-operator) on the master has the manifest's size but "
           f"other bytes (it hashes to sha256:{'b' * 64}): remove it and run the install again, which copies it "
           "again from the stick")  # fmt: skip
    failed = translate(ev("runner_on_failed", host="master1", task="Sync | Copy and verify the bundle",
                          res={"msg": msg, "appliance_failure": "bundle-copy"}))  # fmt: skip
    cfg = type("C", (), {"nodes": [], "site_dir": tmp_path, "ssh": type("S", (), {"mitogen": False})()})()
    with pytest.raises(BundleError) as e:
        _run_failing_install(failed, cfg, tmp_path, monkeypatch)
    assert e.value.exit_code == 4 and path in str(e.value) and "\n" not in str(e.value)
    assert "the bundle copy on the master changed after it was verified" in (e.value.hint or "")


def test_a_connection_lost_under_a_task_is_the_far_nodes_unreachability():
    """Mitogen's words when a node drops off mid-task (seen in the lab with its link pulled during
    a pull delegated from master1 to worker1): the node named is the delegation's target, and the
    cause is said plainly, without Mitogen's "please file a bug"."""
    delegated = translate(
        ev(
            "runner_on_failed",
            host="master1",
            task="Helm | Pull the images ahead on worker1",
            res={
                "msg": "Task failed: the respondent Context has disconnected",
                "_ansible_delegated_vars": {
                    "ansible_host": "10.77.0.12",
                    "ansible_delegated_host": "worker1",
                },
            },
        ),
        {"10.77.0.12": "worker1"},
    )
    assert delegated == [
        HostResult(
            "worker1",
            "Helm | Pull the images ahead on worker1",
            "unreachable",
            "SSH connection lost during the run: the node went down, rebooted, or its network path broke",
            address="10.77.0.12",
        )
    ]
    own = translate(
        ev("runner_on_failed", host="w2", task="t", res={"msg": "Mitogen was disconnected from w2"})
    )
    assert own[0].host == "w2" and own[0].status == "unreachable"
    facts = translate(ev("runner_on_failed", host="worker1", task="Gathering Facts", res={"msg": (
        "Task failed: Channel was disconnected while connection attempt was in progress; this may be "
        "caused by an abnormal Ansible exit, or due to an unreliable target.")}))  # fmt: skip
    assert facts[0].host == "worker1" and facts[0].status == "unreachable"
    other = translate(ev("runner_on_failed", host="w2", task="t", res={"msg": "disconnected from the bus"}))
    assert other[0].status == "failed"


def test_an_unreachable_node_gets_its_address_when_ssh_names_none():
    """Seen in the lab with a node's link down under a ProxyCommand: ssh says only "Connection
    closed by remote host"; the line still names the node with its address."""
    got = translate(
        ev("runner_on_unreachable", host="worker1", task="t",
           res={"msg": "Failed to connect to the host via ssh: Connection closed by remote host"}),
        {"10.77.0.12": "worker1", "10.77.0.11": "master1"},
    )  # fmt: skip
    assert (got[0].host, got[0].address, got[0].status) == ("worker1", "10.77.0.12", "unreachable")


def _get_url_checksum_failure(want: str, got: str, url: str) -> dict:
    """A runner_on_failed event as ansible-runner records it for ansible.builtin.get_url (core 2.x)
    whose download does not match `checksum: sha256:WANT` (recorded from a real run, the module's
    long list of defaulted arguments shortened)."""
    tmp = "/root/.ansible/tmp/ansible-tmp-1795583374.7356691-16998-154319909337434/tmp3yzq1akl"
    res = {"changed": False, "checksum_dest": None, "checksum_src": "f572d396fae9206628714fb2ce00f72e94f2258f",
           "dest": "/opt/appliance/charts/gpu-operator.tgz", "elapsed": 0, "url": url, "src": tmp,
           "msg": f"The checksum for {tmp} did not match {want}; it was {got}.",
           "invocation": {"module_args": {"checksum": f"sha256:{want}", "url": url, "mode": "0644", "force": False}},
           "exception": "(traceback unavailable)", "_ansible_no_log": False}  # fmt: skip
    event = ev("runner_on_failed", host="master1", task="Helm | Download the chart | gpu-operator", res=res)
    event["event_data"]["task_action"] = "ansible.builtin.get_url"
    return event


def test_get_url_checksum_failure_has_its_own_kind_and_names_the_url():
    want, got, url = "9" * 64, "b" * 64, "http://10.77.0.11:8081/blobs/sha256/" + "9" * 64
    [r] = translate(_get_url_checksum_failure(want, got, url))
    assert (r.status, r.kind) == ("failed", "checksum")
    assert r.message == f"The checksum for {url} did not match {want}; it was {got}."  # not the temp file
    other = _get_url_checksum_failure(want, got, url)
    other["event_data"]["task_action"] = "ansible.builtin.command"  # the same words from another module
    assert translate(other)[0].kind == ""
    plain = translate(ev("runner_on_failed", host="master1", task="t", res={"msg": "Request failed: 404"}))
    assert plain[0].kind == ""


def test_a_download_that_does_not_match_the_bundle_is_a_bundle_error_naming_the_blob(tmp_path, monkeypatch):
    """get_url's checksum failure on a file served from the master's bundle copy (a blob that rotted
    after Sync verified it): exit 4, the line names the node, the task (and so the artifact), the
    URL and both digests without get_url's temporary path; the hint names the blob to remove."""
    import pytest

    from appliance_cli.errors import BundleError

    want, got, url = "9" * 64, "b" * 64, "http://10.77.0.11:8081/blobs/sha256/" + "9" * 64
    failed = translate(_get_url_checksum_failure(want, got, url))

    cfg = type("C", (), {"nodes": [], "site_dir": tmp_path, "ssh": type("S", (), {"mitogen": False})(),
                         "bundle": type("B", (), {"path": "/srv/appliance/bundle"})()})()  # fmt: skip
    with pytest.raises(BundleError) as e:
        _run_failing_install(failed, cfg, tmp_path, monkeypatch)
    assert e.value.exit_code == 4
    assert str(e.value) == (
        f"master1: task 'Helm | Download the chart | gpu-operator' failed: what the bundle copy served at {url} "
        f"hashes to sha256:{got}, not the manifest's sha256:{want} (corrupt on master1)"
    )
    assert f"remove /srv/appliance/bundle/blobs/sha256/{want} there" in (e.value.hint or "")


def test_an_unreachable_no_log_task_names_no_address_whose_connection_failed_is_unknown():
    """A censored result (no_log) has no ssh words, and a delegated task's names only the node that
    delegated it: no address, so the service asks which node went silent."""
    censored = "the output has been hidden due to the fact that 'no_log: true' was specified for this result"
    [r] = translate(
        ev(
            "runner_on_unreachable",
            host="master1",
            task="Verify | Pull from worker1",
            res={"censored": censored},
        ),
        {"10.77.0.11": "master1", "10.77.0.12": "worker1"},
    )
    assert (r.host, r.address, r.status) == ("master1", "", "unreachable")
    assert "no_log" in r.message


def test_mitogen_reporting_a_lost_node_unreachable_is_said_plainly():
    """Seen in the lab with worker1's link cut 10 s into an install: Ansible reported the node
    unreachable with Mitogen's words ("please file a bug"); the line says what happened instead."""
    got = translate(ev("runner_on_unreachable", host="worker1", task="Apt | Read the record", res={"msg": (
        "Task failed: Mitogen was disconnected from the remote environment while a call was in-progress. If you "
        "feel this is in error, please file a bug. Original error was: the respondent Context has disconnected")}),
        {"10.77.0.12": "worker1"})  # fmt: skip
    assert got == [HostResult("worker1", "Apt | Read the record", "unreachable",
                              "SSH connection lost during the run: the node went down, rebooted, or its network path broke",
                              address="10.77.0.12")]  # fmt: skip
