import pytest

from appliance_cli.cli.main import build_parser, main
from appliance_cli.lab import supervisor


def test_lab_parser() -> None:
    args = build_parser().parse_args(["lab", "up", "--nodes", "2", "--rebuild"])
    assert (args.nodes, args.rebuild) == (2, True)
    args = build_parser().parse_args(["lab", "ssh", "master1", "hostname", "-f"])
    assert (args.node, args.cmd) == ("master1", ["hostname", "-f"])
    assert build_parser().parse_args(["lab", "down", "--purge"]).purge


def test_bad_node_count_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "up", "--nodes", "0"]) == 2
    assert "--nodes" in capsys.readouterr().err


def test_nspawn_argv_follows_lab_notes() -> None:
    spec = supervisor.NodeSpec(
        name="master1",
        index=1,
        machine="lab-master1",
        rootfs="/r",
        netns="lab-node1",
        cgroup_dirs=[],
        nspawn_pidfile="/p",
        ready_file="/r",
        events_file="/e",
        extra_syscalls=["open_by_handle_at"],
    )
    argv = supervisor.nspawn_argv(spec)
    for opt in (
        "--boot",
        "--register=no",
        "--keep-unit",
        "--private-network",
        "--resolv-conf=off",
        "--network-namespace-path=/run/netns/lab-node1",
        "--system-call-filter=@keyring bpf",
        "--system-call-filter=open_by_handle_at",
        "--machine=lab-master1",
        "--hostname=master1",
    ):
        assert opt in argv
