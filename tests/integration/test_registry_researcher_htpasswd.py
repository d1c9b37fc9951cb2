"""The registry role's registry_htpasswd module (the researcher registry's site accounts) with the
REAL htpasswd on a temporary directory: bcrypt entries, mode and group, a re-run that changes
nothing, a changed password re-hashed, a removed user dropped, check mode, an empty password."""

from __future__ import annotations

import grp
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests._support.modules import FakeModule, ModuleFailed, load_role_module, run_for_real

GROUP = "docker-registry"
pytestmark = pytest.mark.skipif(
    not (shutil.which("htpasswd") and GROUP in {g.gr_name for g in grp.getgrall()} and os.geteuid() == 0),
    reason="needs root, apache2-utils (htpasswd) and the docker-registry group: scripts/bootstrap.sh installs them",
)
ht = load_role_module("registry", "registry_htpasswd")


def real_module(params: dict[str, Any], check_mode: bool = False) -> FakeModule:
    """The module double running the real tools."""
    return FakeModule(params, check_mode=check_mode, answer=run_for_real)


def accepts(path: Path, user: str, password: str) -> bool:
    p = subprocess.run(
        ["htpasswd", "-v", "-i", str(path), user], input=password, capture_output=True, text=True
    )
    return p.returncode == 0


def test_exact_users_bcrypt_and_idempotent(tmp_path):
    f = tmp_path / "htpasswd-push"
    users = {"alice": "pa55-alice", "bob": "pa55-bob"}
    check = ht.converge(real_module({"path": str(f), "group": GROUP, "users": users}, check_mode=True))
    assert check["changed"] and check["added"] == ["alice", "bob"] and not f.exists()
    m = real_module({"path": str(f), "group": GROUP, "users": users})
    r = ht.converge(m)
    assert r["changed"] and r["added"] == ["alice", "bob"]
    assert all(accepts(f, u, p) for u, p in users.items())
    assert [line.split(":", 1)[0] for line in f.read_text().splitlines()] == ["alice", "bob"]
    assert all(line.split(":", 1)[1].startswith("$2y$") for line in f.read_text().splitlines())
    st = f.stat()
    assert (oct(stat.S_IMODE(st.st_mode)), grp.getgrgid(st.st_gid).gr_name) == ("0o640", GROUP)
    # no password on any command line
    assert not any(p in " ".join(argv) for argv in m.ran for p in users.values())
    before = f.read_text()
    again = ht.converge(real_module({"path": str(f), "group": GROUP, "users": users}))
    assert again == {"changed": False, "added": [], "updated": [], "removed": []}
    assert f.read_text() == before


def test_changed_password_and_removed_user(tmp_path):
    f = tmp_path / "htpasswd-push"
    ht.converge(real_module({"path": str(f), "group": GROUP, "users": {"alice": "old", "bob": "b"}}))
    bob_line = next(line for line in f.read_text().splitlines() if line.startswith("bob:"))
    r = ht.converge(real_module({"path": str(f), "group": GROUP, "users": {"alice": "new", "carol": "c"}}))
    assert (r["added"], r["updated"], r["removed"]) == (["carol"], ["alice"], ["bob"])
    assert accepts(f, "alice", "new") and not accepts(f, "alice", "old") and accepts(f, "carol", "c")
    assert bob_line not in f.read_text() and not accepts(f, "bob", "b")


def test_a_file_damaged_past_utf8_is_repaired_not_a_traceback(tmp_path):
    f = tmp_path / "htpasswd-push"
    ht.converge(real_module({"path": str(f), "group": GROUP, "users": {"alice": "a"}}))
    f.write_bytes(f.read_bytes() + b"m\xe9chant:$2y$05$x\n")
    r = ht.converge(real_module({"path": str(f), "group": GROUP, "users": {"alice": "a"}}))
    assert r == {"changed": True, "added": [], "updated": [], "removed": ["m\ufffdchant"]}
    assert [line.split(":", 1)[0] for line in f.read_text().splitlines()] == ["alice"]
    assert accepts(f, "alice", "a")


def test_an_empty_password_is_refused_naming_the_user_only(tmp_path):
    with pytest.raises(ModuleFailed, match="user alice: empty password"):
        ht.converge(real_module({"path": str(tmp_path / "h"), "group": GROUP, "users": {"alice": ""}}))
