"""Runs that do not reach the whole site as installed. `--check` on what was never installed stops
with the way forward instead of failing on what a dry run cannot look at: the master without the
bundle copy (bundle_repo), a node whose apt does not know the offline repository yet (os_prereqs).
A limited run checks the registry from a node of that run. Real ansible-playbook runs on
localhost; check mode writes nothing (the os_prereqs case reads this machine's /etc/apt and leaves
it as it is)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_k8s_templates import run_playbook

OFFLINE_LIST = Path("/etc/apt/sources.list.d/appliance-offline.list")


def _role_tasks(role: str, tasks_from: str) -> list[dict]:
    return [
        {
            "name": "Guard",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Role tasks",
                    "ansible.builtin.include_role": {"name": role, "tasks_from": tasks_from},
                }
            ],
        }
    ]


def _bundle_dirs(tmp: Path, *, stick: bool, copy: bool) -> dict[str, str]:
    src, dest = tmp / "stick", tmp / "copy"
    for present, d in ((stick, src), (copy, dest)):
        if present:
            d.mkdir(parents=True)
            (d / "manifest.json").write_text("{}\n")
    return {
        "bundle_repo_source": str(src),
        "bundle_repo_path": str(dest),
        "bundle_repo_expect_manifest_sha256": "",
    }


def _dry_run_sync(tmp: Path, *, stick: bool, copy: bool):
    """bundle_repo's copy step under --check, with the stick and the master's copy as asked."""
    return run_playbook(
        tmp,
        _role_tasks("bundle_repo", "0010-sync.yml"),
        _bundle_dirs(tmp, stick=stick, copy=copy),
        check=False,
        dry_run=True,
    )


def test_dry_run_on_a_master_without_the_bundle_copy_says_why(tmp_path: Path) -> None:
    proc = _dry_run_sync(tmp_path, stick=True, copy=False)
    assert proc.returncode != 0
    assert "--check on a site that was never installed: the bundle is not on localhost yet" in proc.stdout
    assert "Run `appliance install` first" in proc.stdout
    assert not (tmp_path / "copy").exists(), "the dry run wrote the bundle copy"


def test_dry_run_on_a_master_with_the_bundle_copy_goes_on(tmp_path: Path) -> None:
    # no stick: the copy step itself is skipped, so only the guard is under test
    proc = _dry_run_sync(tmp_path, stick=False, copy=True)
    assert proc.returncode == 0, proc.stdout
    assert "never installed" not in proc.stdout


@pytest.mark.skipif(
    OFFLINE_LIST.exists(), reason="this machine's apt already has the appliance's offline source"
)
def test_dry_run_on_a_node_whose_apt_lacks_the_offline_repository_says_why(tmp_path: Path) -> None:
    before = sorted(p.name for p in Path("/etc/apt/sources.list.d").iterdir())
    proc = run_playbook(
        tmp_path,
        _role_tasks("os_prereqs", "0010-apt.yml"),
        {"appliance_apt_repo_url": "http://10.77.0.11:8081/apt/debian-bookworm"},
        check=False,
        dry_run=True,
    )
    assert proc.returncode != 0
    assert "--check: localhost was never installed (its apt does not know the offline" in proc.stdout
    assert "appliance install --limit localhost" in proc.stdout
    assert sorted(p.name for p in Path("/etc/apt/sources.list.d").iterdir()) == before
    assert not OFFLINE_LIST.exists()


@pytest.mark.parametrize(
    ("trusting", "expected"),
    [
        (["master1", "worker2"], "worker2"),  # `--limit master1,worker2`: the worker of the run
        (["master1"], "master1"),  # `--limit master1`: worker1 has not been prepared
        (None, "master1"),  # the trust step did not run
    ],
)
def test_registry_pull_check_runs_on_a_node_of_this_run(tmp_path: Path, trusting, expected) -> None:
    """The pull check needs a node that trusted the registry CA in this run (not the site's first
    worker, which `--limit master1` leaves untouched)."""
    inv = tmp_path / "inventory.yml"
    local = {"ansible_connection": "local"}
    inv.write_text(
        "all:\n  children:\n"
        "    masters: {hosts: {master1: %s}}\n"
        "    workers: {hosts: {worker1: %s, worker2: %s}}\n" % ((local,) * 3)
    )
    plays = [
        {
            "hosts": "master1",
            "gather_facts": False,
            "vars_files": [str(Path(__file__).resolve().parents[2] / "roles/registry/defaults/main.yml")],
            "vars": {"appliance_master": "master1"},
            "tasks": [
                {
                    "ansible.builtin.set_fact": {"registry_trust_hosts": trusting},
                    "when": trusting is not None,
                },
                {"ansible.builtin.debug": {"msg": "verify host <{{ registry_verify_host | trim }}>"}},
            ],
        }
    ]
    proc = run_playbook(tmp_path, plays, {})
    assert f"verify host <{expected}>" in proc.stdout
