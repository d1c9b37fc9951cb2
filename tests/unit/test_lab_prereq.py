from pathlib import Path

import pytest

from appliance_cli.errors import PrerequisiteError
from appliance_cli.lab.prereq import REQUIRED_COMMANDS, check_prerequisites, missing_commands


def _fake_path(tmp_path: Path, present: list[str]) -> str:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for cmd in present:
        exe = bindir / cmd
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    return str(bindir)


def test_all_present(tmp_path: Path) -> None:
    path = _fake_path(tmp_path, list(REQUIRED_COMMANDS))
    assert missing_commands(path) == {}
    check_prerequisites(path=path, euid=0)


def test_missing_commands_named_with_apt_hint(tmp_path: Path) -> None:
    path = _fake_path(tmp_path, [c for c in REQUIRED_COMMANDS if c not in ("systemd-nspawn", "mmdebstrap")])
    with pytest.raises(PrerequisiteError) as info:
        check_prerequisites(path=path, euid=0)
    assert "systemd-nspawn" in info.value.message and "mmdebstrap" in info.value.message
    assert info.value.hint and "apt-get install" in info.value.hint
    assert "systemd-container" in info.value.hint
    assert info.value.exit_code == 3


def test_not_root(tmp_path: Path) -> None:
    path = _fake_path(tmp_path, list(REQUIRED_COMMANDS))
    with pytest.raises(PrerequisiteError, match="root"):
        check_prerequisites(path=path, euid=1000)


def _sysctls(tmp_path, instances: int, watches: int):
    d = tmp_path / "fs/inotify"
    d.mkdir(parents=True)
    (d / "max_user_instances").write_text(f"{instances}\n")
    (d / "max_user_watches").write_text(f"{watches}\n")
    return d


def test_host_inotify_limits_are_raised_for_the_nodes_and_never_lowered(tmp_path):
    from appliance_cli.lab.prereq import ensure_host_limits

    d = _sysctls(tmp_path, 128, 8192)
    raised = ensure_host_limits(16, proc_sys=str(tmp_path))
    assert raised == {"fs.inotify.max_user_instances": 512, "fs.inotify.max_user_watches": 524288}
    assert (d / "max_user_instances").read_text() == "512\n"
    assert ensure_host_limits(16, proc_sys=str(tmp_path)) == {}  # enough already: nothing written
    (d / "max_user_instances").write_text("4096\n")
    assert ensure_host_limits(32, proc_sys=str(tmp_path)) == {}
    assert (d / "max_user_instances").read_text() == "4096\n"


def test_a_limit_that_cannot_be_raised_is_refused_in_one_line_naming_the_sysctl(tmp_path, monkeypatch):
    import builtins

    import pytest

    from appliance_cli.errors import PrerequisiteError
    from appliance_cli.lab import prereq

    _sysctls(tmp_path, 128, 1_000_000)

    def read_only_fs(path, mode="r", *a, **kw):  # as /proc/sys is in a container without the right
        if "w" in mode:
            raise PermissionError(13, "Read-only file system")
        return builtins.open(path, mode, *a, **kw)

    monkeypatch.setattr(prereq, "open", read_only_fs, raising=False)
    with pytest.raises(PrerequisiteError) as err:
        prereq.ensure_host_limits(16, proc_sys=str(tmp_path))
    assert "\n" not in err.value.message
    assert err.value.message.startswith("fs.inotify.max_user_instances is 128, too low for 16 lab nodes")
    assert "sysctl -w fs.inotify.max_user_instances=512" in err.value.hint
