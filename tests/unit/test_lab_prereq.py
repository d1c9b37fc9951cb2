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
