"""os_prereqs' node modules (library/kernel_prereqs.py, library/apt_offline_sources.py) on a
temporary tree: what they write, what they run, what they report, in check mode too.
The lab e2e suite runs the same modules on real nodes (tests/e2e/test_os_prereqs_state.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.runner.events import HostWarning
from appliance_cli.runner.translate import translate
from tests._support import modules
from tests._support.modules import ModuleFailed, load_role_module

ROLE = Path(__file__).resolve().parents[2] / "roles" / "os_prereqs"


kernel = load_role_module("os_prereqs", "kernel_prereqs")
node_files = sys.modules["ansible.module_utils.node_files"]  # the project's, loaded with the module
apt_sources = load_role_module("os_prereqs", "apt_offline_sources")


def fake_module(params: dict[str, Any], check_mode: bool = False, answers=None) -> modules.FakeModule:
    """Commands answer from `answers` (the argv joined -> rc, stderr), by default rc 0."""
    answers = answers or {}

    def answer(argv, _data):
        rc, err = answers.get(" ".join(argv), (0, ""))
        return rc, "", err

    return modules.FakeModule(params, check_mode=check_mode, answer=answer)


@pytest.fixture
def kernel_tree(tmp_path, monkeypatch):
    """A fake /proc/swaps, /proc/sys, /sys/module and modules.builtin, plus the files to write."""
    (tmp_path / "proc/sys/net/ipv4").mkdir(parents=True)
    (tmp_path / "proc/sys/net/ipv4/ip_forward").write_text("0\n")
    (tmp_path / "proc/sys/fs/inotify").mkdir(parents=True)
    (tmp_path / "proc/sys/fs/inotify/max_user_watches").write_text("8192\n")
    (tmp_path / "proc/swaps").write_text("Filename\tType\tSize\tUsed\tPriority\n")
    (tmp_path / "sys/module/overlay").mkdir(parents=True)
    (tmp_path / "modules.builtin").write_text("kernel/net/bridge/br_netfilter.ko\n")
    (tmp_path / "fstab").write_text("UUID=1 / ext4 defaults 0 1\n/swap.img none swap sw 0 0\n")
    monkeypatch.setattr(kernel, "PROC_SWAPS", str(tmp_path / "proc/swaps"))
    monkeypatch.setattr(kernel, "PROC_SYS", str(tmp_path / "proc/sys"))
    monkeypatch.setattr(kernel, "SYS_MODULE", str(tmp_path / "sys/module"))
    monkeypatch.setattr(kernel, "MODULES_BUILTIN", str(tmp_path / "modules.builtin"))
    return tmp_path


def kernel_params(tree: Path, **over: Any) -> dict[str, Any]:
    p = {
        "swap_off": True,
        "fstab": str(tree / "fstab"),
        "modules": ["overlay", "br_netfilter"],
        "modules_file": str(tree / "modules-load.d/kubernetes.conf"),
        "modules_content": "overlay\nbr_netfilter\n",
        "sysctls": {"net.ipv4.ip_forward": 1, "fs.inotify.max_user_watches": 524288},
        "sysctl_file": str(tree / "sysctl.d/99-kubernetes.conf"),
        "sysctl_content": "net.ipv4.ip_forward = 1\n",
        "host_owned": False,
        "virtualization": "systemd-nspawn",
    }
    return {**p, **over}


def test_fstab_swap_lines_are_commented_once():
    text = "UUID=1 / ext4 defaults 0 1\n/swap.img none swap sw 0 0\n# /old none swap sw 0 0\n"
    once = kernel.fstab_without_swap(text)
    assert (
        once.splitlines()[1]
        == "# /swap.img none swap sw 0 0  # disabled by appliance (kubelet needs swap off)"
    )
    assert (
        once.splitlines()[0] == "UUID=1 / ext4 defaults 0 1"
        and once.splitlines()[2] == "# /old none swap sw 0 0"
    )
    assert kernel.fstab_without_swap(once) == once


def test_swap_active_reads_proc_swaps_lines():
    assert not kernel.swap_active("Filename\tType\tSize\tUsed\tPriority\n")
    assert kernel.swap_active("Filename\tType\n/swap.img file 1024 0 -2\n")


def test_first_run_writes_files_sets_what_differs_and_second_run_changes_nothing(kernel_tree):
    m = fake_module(kernel_params(kernel_tree))
    r = kernel.converge(m)
    assert r["changed"] and r["appliance_warnings"] == []
    # both modules active (loaded / built in): no modprobe; swap off already: no swapoff
    assert ["sysctl", "-w", "net.ipv4.ip_forward=1"] in m.ran
    assert ["sysctl", "-w", "fs.inotify.max_user_watches=524288"] in m.ran
    assert not any(a[0] in ("modprobe", "swapoff") for a in m.ran)
    assert "# /swap.img none swap sw 0 0" in (kernel_tree / "fstab").read_text()
    assert (kernel_tree / "sysctl.d/99-kubernetes.conf").read_text() == "net.ipv4.ip_forward = 1\n"
    assert oct((kernel_tree / "modules-load.d/kubernetes.conf").stat().st_mode & 0o777) == "0o644"
    assert {d["after_header"] for d in r["diff"]} == {
        str(kernel_tree / p)
        for p in ("fstab", "modules-load.d/kubernetes.conf", "sysctl.d/99-kubernetes.conf")
    }
    # what `sysctl -w` would have done
    (kernel_tree / "proc/sys/net/ipv4/ip_forward").write_text("1\n")
    (kernel_tree / "proc/sys/fs/inotify/max_user_watches").write_text("524288\n")
    again = fake_module(kernel_params(kernel_tree))
    r2 = kernel.converge(again)
    assert not r2["changed"] and r2["diff"] == [] and again.ran == []


def test_active_swap_is_turned_off_and_missing_module_loaded(kernel_tree):
    (kernel_tree / "proc/swaps").write_text("Filename\tType\n/swap.img file 1024 0 -2\n")
    m = fake_module(kernel_params(kernel_tree, modules=["overlay", "nf_conntrack"]))
    r = kernel.converge(m)
    assert ["swapoff", "-a"] in m.ran and r["swap_disabled"]
    assert ["modprobe", "nf_conntrack"] in m.ran and r["modules_loaded"] == ["nf_conntrack"]


def test_a_parameter_that_cannot_be_set_fails_on_a_real_host_naming_it(kernel_tree):
    refused = {"sysctl -w fs.inotify.max_user_watches=524288": (255, "sysctl: permission denied on key")}
    m = fake_module(kernel_params(kernel_tree), answers=refused)
    with pytest.raises(
        ModuleFailed, match=r"sysctl fs\.inotify\.max_user_watches=524288 could not be set: .*denied"
    ):
        kernel.converge(m)


def test_a_container_node_reports_what_the_host_owns_as_limits(kernel_tree):
    refused = {
        "sysctl -w fs.inotify.max_user_watches=524288": (255, "sysctl: permission denied on key"),
        "modprobe nf_conntrack": (1, "modprobe: FATAL: Module nf_conntrack not found"),
    }
    m = fake_module(kernel_params(kernel_tree, host_owned=True, modules=["nf_conntrack"]), answers=refused)
    r = kernel.converge(m)
    assert r["appliance_warnings"] == [
        "kernel module nf_conntrack could not be loaded in this systemd-nspawn node: modprobe: FATAL: Module "
        "nf_conntrack not found (it must be loaded or built into the host kernel)",
        "sysctl fs.inotify.max_user_watches=524288 cannot be set in this systemd-nspawn node (sysctl: "
        "permission denied on key); live value is 8192: set it on the host",
    ]
    assert r["sysctls_set"] == ["net.ipv4.ip_forward=1"] and r["modules_loaded"] == []
    # the result as the job event carries it reaches the CLI as warnings naming the node,
    # whatever the task is called
    event = {
        "event": "runner_on_ok",
        "event_data": {"host": "worker1", "task": "Kernel | Any name", "res": r},
    }
    assert [w for w in translate(event) if isinstance(w, HostWarning)] == [
        HostWarning("worker1", msg) for msg in r["appliance_warnings"]
    ]


def test_check_mode_writes_and_runs_nothing_and_predicts_read_only_parameters(kernel_tree, monkeypatch):
    before = {p: p.read_text() for p in kernel_tree.rglob("*") if p.is_file()}
    # a container's /proc/sys is mounted read-only except net.* (root cannot fake that in a tmp tree)
    monkeypatch.setattr(kernel, "sysctl_writable", lambda key: key.startswith("net."))
    m = fake_module(kernel_params(kernel_tree, host_owned=True), check_mode=True)
    r = kernel.converge(m)
    assert m.ran == [] and {p: p.read_text() for p in kernel_tree.rglob("*") if p.is_file()} == before
    assert r["changed"] and r["sysctls_set"] == ["net.ipv4.ip_forward=1"]
    assert r["appliance_warnings"] == [
        "sysctl fs.inotify.max_user_watches=524288 cannot be set in this systemd-nspawn node "
        f"({kernel_tree}/proc/sys/fs/inotify/max_user_watches: read-only); live value is 8192: set it on the host"
    ]


def test_converge_file_rewrites_on_content_or_mode_only(tmp_path):
    f = tmp_path / "d" / "x.conf"
    assert node_files.converge_file(str(f), "a\n", 0o644, check_mode=True)["before"] == ""
    assert not f.exists()
    assert node_files.converge_file(str(f), "a\n", 0o644) is not None
    assert node_files.converge_file(str(f), "a\n", 0o644) is None
    assert node_files.converge_file(str(f), "a\n", 0o600) is not None
    assert f.stat().st_mode & 0o777 == 0o600
    d = node_files.converge_file(str(f), "b\n", 0o600)
    assert d["before"] == "a\n" and d["after"] == "b\n" and f.read_text() == "b\n"
    assert [p.name for p in f.parent.iterdir()] == ["x.conf"]  # no temporary file left behind


@pytest.fixture
def apt_tree(tmp_path):
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text("Types: deb\nURIs: http://deb.example/debian\n")
    (d / "vendor.list").write_text("deb http://vendor.example/ stable main\n")
    (d / "README").write_text("not a source\n")
    (tmp_path / "sources.list").write_text("deb http://deb.example/debian bookworm main\n")
    return tmp_path


def apt_params(tree: Path, **over: Any) -> dict[str, Any]:
    p = {
        "content": f"deb [signed-by={tree}/keyrings/appliance-offline.asc] http://10.77.0.11:8081/apt/debian-12/ ./\n",
        "path": str(tree / "sources.list.d/appliance-offline.list"),
        "exclusive": True,
        "sources_dir": str(tree / "sources.list.d"),
        "sources_list": str(tree / "sources.list"),
        "aside_dir": str(tree / "disabled"),
        "keyring": KEY,
        "keyring_path": str(tree / "keyrings/appliance-offline.asc"),
        "index_record": str(tree / "index.done"),
        "index_key": "sources-digest bundle-digest",
        "node": "worker1",
    }
    return {**p, **over}


KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZ0test\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n"


def test_the_key_is_written_with_the_source_and_a_new_key_is_a_change(apt_tree):
    r = apt_sources.converge(apt_params(apt_tree), check_mode=False)
    key = apt_tree / "keyrings/appliance-offline.asc"
    assert r["changed"] and key.read_text() == KEY and key.stat().st_mode & 0o777 == 0o644
    assert not apt_sources.converge(apt_params(apt_tree), check_mode=False)["changed"]
    other = KEY.replace("test", "othr")
    again = apt_sources.converge(apt_params(apt_tree, keyring=other), check_mode=False)
    assert again["changed"] and key.read_text() == other  # a new bundle's key: apt updates again
    assert not apt_sources.converge(apt_params(apt_tree, keyring=other), check_mode=True)["changed"]


def test_without_a_key_no_key_file_is_written(apt_tree):
    apt_sources.converge(apt_params(apt_tree, keyring=""), check_mode=False)
    assert not (apt_tree / "keyrings").exists()


def test_apt_sources_become_the_offline_repository_only(apt_tree):
    r = apt_sources.converge(apt_params(apt_tree), check_mode=False)
    assert r["changed"]
    assert r["moved"] == [
        str(apt_tree / p) for p in ("sources.list.d/debian.sources", "sources.list.d/vendor.list")
    ] + [str(apt_tree / "sources.list")]
    assert sorted(p.name for p in (apt_tree / "sources.list.d").iterdir()) == [
        "README",
        "appliance-offline.list",
    ]
    assert sorted(p.name for p in (apt_tree / "disabled").iterdir()) == [
        "debian.sources",
        "sources.list",
        "vendor.list",
    ]
    assert (apt_tree / "disabled/vendor.list").read_text() == "deb http://vendor.example/ stable main\n"
    again = apt_sources.converge(apt_params(apt_tree), check_mode=False)
    assert not again["changed"] and again["moved"] == []


def test_apt_sources_check_mode_and_non_exclusive(apt_tree):
    r = apt_sources.converge(apt_params(apt_tree), check_mode=True)
    assert r["changed"] and len(r["moved"]) == 3
    assert (
        not (apt_tree / "disabled").exists()
        and not (apt_tree / "sources.list.d/appliance-offline.list").exists()
    )
    r = apt_sources.converge(apt_params(apt_tree, exclusive=False), check_mode=False)
    assert r["moved"] == [] and (apt_tree / "sources.list").exists()
    assert (apt_tree / "sources.list.d/appliance-offline.list").read_text().startswith("deb [signed-by=")


def test_the_index_is_current_only_when_its_record_holds_this_key(apt_tree):
    record = apt_tree / "index.done"
    assert apt_sources.converge(apt_params(apt_tree), check_mode=False)["index_current"] is False  # none yet
    record.write_text("sources-digest bundle-digest\n")  # as 0011-apt-index.yml writes it, last
    assert apt_sources.converge(apt_params(apt_tree), check_mode=False)["index_current"] is True
    record.write_text("sources-digest an-older-bundle\n")
    assert apt_sources.converge(apt_params(apt_tree), check_mode=False)["index_current"] is False
    record.write_bytes(b"\xff\xfe")
    assert apt_sources.converge(apt_params(apt_tree), check_mode=False)["index_current"] is False
    assert (
        apt_sources.converge(apt_params(apt_tree, index_record=""), check_mode=False)["index_current"]
        is False
    )


def test_a_dry_run_stops_a_node_apt_was_never_pointed_at_and_names_it(apt_tree):
    why = apt_sources.never_installed(apt_params(apt_tree), check_mode=True)
    assert why == (
        "--check: worker1 was never installed (its apt does not know the offline repository yet), so its "
        "packages cannot be compared. Run `appliance install --limit worker1` first; --check then reports drift"
    )
    assert apt_sources.never_installed(apt_params(apt_tree), check_mode=False) is None  # an install goes on
    apt_sources.converge(apt_params(apt_tree), check_mode=False)
    assert apt_sources.never_installed(apt_params(apt_tree), check_mode=True) is None  # installed once


def _task_names_in_order() -> list[str]:
    """The role's task names in run order, following its static import_tasks."""
    tasks_dir = ROLE / "tasks"

    def walk(path: Path) -> list[str]:
        names: list[str] = []
        for task in yaml.safe_load(path.read_text()) or []:
            imported = task.get("ansible.builtin.import_tasks")
            names += walk(tasks_dir / imported) if imported else [task.get("name", "")]
        return names

    return walk(tasks_dir / "main.yml")


def test_chrony_configuration_is_written_before_its_package_is_installed():
    # Installed first, chrony would start with Debian's pool.ntp.org: on an offline site its name
    # lookup blocks until the resolver gives up, and the restart with the site's configuration
    # waited for it (4.5 s measured in the lab).
    names = _task_names_in_order()
    assert names.index("Time | Chrony configuration") < names.index(
        "Packages | Install prerequisites from the offline repository"
    )
