"""container_runtime's question to the running containerd (roles/container_runtime/library/
containerd_running.py), with `systemctl`, `ctr` and `journalctl` answering as they do on a node
whose CRI plugin failed (seen on the lab's 16-node bench: "failed to create fsnotify watcher: too
many open files"), on a healthy node, and on one whose daemon started before its configuration was
last written. The process asked about is this test's own, so its start time is real."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests._support.modules import FakeModule, ModuleFailed, load_role_module

m = load_role_module("container_runtime", "containerd_running")

REASON = (
    'failed to load plugin io.containerd.grpc.v1.cri error="failed to create CRI service: failed to create '
    'fsnotify watcher: too many open files" type=io.containerd.grpc.v1'
)
SOCKET = "/run/containerd/containerd.sock"


def _module(config: Path, cri: str, journal: list[str], pids: list[str] | None = None) -> FakeModule:
    """systemctl answers each of PIDS in turn (default: this process), ctr lists the CRI plugin
    with status CRI, journalctl prints JOURNAL."""
    answers = iter(pids or [str(os.getpid())])

    def answer(argv: list[str], _data: Any) -> tuple[int, str, str]:
        if argv[0] == "systemctl":
            assert argv == ["systemctl", "show", "-p", "MainPID", "--value", "containerd"]
            return 0, next(answers) + "\n", ""
        if argv[0] == "ctr":
            assert argv == ["ctr", "--address", SOCKET, "plugins", "ls"]
            return 0, f"TYPE ID PLATFORMS STATUS\nio.containerd.grpc.v1 cri linux/amd64 {cri}\n", ""
        if argv[0] == "journalctl":
            return 0, "\n".join(["starting containerd", *journal]) + "\n", ""
        raise AssertionError(argv)

    params = {"config": str(config), "socket": SOCKET, "node": "worker8", "retries": 3, "delay": 1}
    return FakeModule(params, answer=answer)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text("")
    os.utime(path, (0, 0))  # written long before the daemon started
    return path


@pytest.mark.parametrize(
    ("journal", "says"),
    [
        ([REASON, "containerd successfully booted"], REASON),
        (["nothing about the plugin"], "journalctl -u containerd says why"),
    ],
)
def test_a_cri_plugin_that_did_not_load_is_named_with_containerds_reason(
    config: Path, journal: list[str], says: str
) -> None:
    with pytest.raises(ModuleFailed) as e:
        m.converge(_module(config, "error", journal))
    assert str(e.value) == f"containerd on worker8: its CRI plugin did not load (status error): {says}"
    assert e.value.result["cri"] == "error"


def test_a_healthy_daemon_says_no_more(config: Path) -> None:
    mod = _module(config, "ok", [REASON])
    out = m.converge(mod)
    assert (out["changed"], out["cri"]) == (False, "ok")
    assert out["config_written"] == 0 and 0 < out["started"] <= time.time()
    assert [argv[0] for argv in mod.ran] == ["systemctl", "ctr"]  # no journal for a healthy plugin


def test_a_daemon_started_before_its_configuration_was_written_is_told_to_restart(config: Path) -> None:
    os.utime(config, (time.time(), time.time()))  # this test's process started before that
    with pytest.raises(ModuleFailed) as e:
        m.converge(_module(config, "ok", []))
    assert str(e.value) == (
        f"containerd on worker8: it started before {config} was last written and runs an older configuration: "
        "restart it (systemctl restart containerd)"
    )


def test_a_daemon_not_running_yet_is_asked_again_then_named(config: Path) -> None:
    slept: list[float] = []
    out = m.converge(_module(config, "ok", [], pids=["0", "0", str(os.getpid())]), sleep=slept.append)
    assert out["cri"] == "ok" and slept == [1, 1]
    with pytest.raises(ModuleFailed) as e:
        m.converge(_module(config, "ok", [], pids=["0"] * 4), sleep=slept.append)
    assert str(e.value) == (
        "containerd on worker8: it is not running (systemctl show containerd: MainPID 0, asked 4 times): "
        "journalctl -u containerd says why"
    )
