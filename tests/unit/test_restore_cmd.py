"""`appliance restore` without a cluster: which backup, the one-line refusals (unknown backup, a
sha256 mismatch naming the file, the master unreachable, no confirmation) made before the playbook
runs, and what it passes to the playbook and prints after it."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from appliance_cli.cli import restore_cmd
from appliance_cli.cli.main import main
from appliance_cli.core import backups, restoreplan
from appliance_cli.core.opstate import EtcdRestore
from appliance_cli.errors import ApplianceError, Unreachable, UsageError

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "appliance.yml"
ROOT = "/var/lib/appliance/backups"
OLD, NEW = "20261124T101500Z", "20261125T010203Z"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "appliance.yml").write_text(EXAMPLE.read_text())
    return tmp_path


class FakeMaster:
    """run_on on the master: backups listed, their sums checked, the state read; nothing else."""

    def __init__(self, sums: str = "", state: dict | None = None, encrypted: bool = False) -> None:
        self.sums, self.state, self.commands = sums, state or {}, []  # type: ignore[var-annotated]
        self.encrypted = encrypted

    def __call__(self, cfg, node, command, timeout=60):  # type: ignore[no-untyped-def]
        self.commands.append(command)  # argv: `sh -c SCRIPT sh PATH` where a shell is needed
        script, arg = (command[2], command[4]) if command[:2] == ["sh", "-c"] else ("", "")
        if script.startswith("ls -1 ") and arg == ROOT:
            return f"{OLD}\n{NEW}\nnotes.txt\n"
        if "sha256sum" in script:  # one round trip: the snapshot's name is its second argument
            assert command[5] == "etcd-snapshot.db.age", command
            return ("snapshot=encrypted\n" if self.encrypted else "snapshot=clear\n") + self.sums
        if script.startswith("cat ") and arg == restore_cmd.STATE_FILE:  # module resumable_state's layout
            return json.dumps({"schema": 1, "etcd_restore": self.state}) if self.state else ""
        raise AssertionError(command)


def _no_playbook(*a, **k):  # type: ignore[no-untyped-def]
    pytest.fail("the playbook ran")


def test_latest_is_the_newest_and_a_name_must_be_one_of_them() -> None:
    listing = [NEW, "notes.txt", OLD]
    assert restoreplan.pick_backup(listing, "latest", ROOT, "m1") == NEW
    assert restoreplan.pick_backup(listing, OLD, ROOT, "m1") == OLD
    with pytest.raises(ApplianceError) as e:
        restoreplan.pick_backup(listing, "20200101T000000Z", ROOT, "m1")
    assert e.value.message == f"--backup 20200101T000000Z: no such backup on m1 under {ROOT}"
    assert e.value.hint == f"the backups there (latest last): {OLD}, {NEW}"
    with pytest.raises(UsageError, match=r"--backup notes\.txt: not a backup name"):
        restoreplan.pick_backup(listing, "notes.txt", ROOT, "m1")
    with pytest.raises(ApplianceError, match=f"no backup on m1 under {ROOT}"):
        restoreplan.pick_backup(["notes.txt"], "latest", ROOT, "m1")


def test_the_files_that_fail_their_sums_are_named() -> None:
    out = (
        "etcd-snapshot.db: FAILED\nhelm-values/a_b.yaml: FAILED open or read\n"
        "sha256sum: helm-values/a_b.yaml: No such file or directory\n"
        "sha256sum: WARNING: 1 computed checksum did NOT match\n"
    )
    assert restoreplan.failed_sums(out) == ["etcd-snapshot.db", "helm-values/a_b.yaml"]
    assert restoreplan.failed_sums("") == []


def test_an_unknown_backup_is_refused_in_one_line(site, capsys, monkeypatch) -> None:
    monkeypatch.setattr(backups, "run_on", FakeMaster())
    monkeypatch.setattr(restore_cmd, "run_playbook", _no_playbook)
    assert main(["restore", "--site", str(site), "--backup", "20200101T000000Z", "--yes"]) == 1
    err = capsys.readouterr().err
    assert f"--backup 20200101T000000Z: no such backup on master1 under {ROOT}" in err
    assert f"{OLD}, {NEW}" in err and "Traceback" not in err


def test_a_sum_mismatch_names_the_file_and_changes_nothing(site, capsys, monkeypatch) -> None:
    master = FakeMaster(
        sums="etcd-snapshot.db: FAILED\nsha256sum: WARNING: 1 computed checksum did NOT match\n"
    )
    monkeypatch.setattr(backups, "run_on", master)
    monkeypatch.setattr(restore_cmd, "run_playbook", _no_playbook)
    assert main(["restore", "--site", str(site), "--yes"]) == 1
    err = capsys.readouterr().err
    assert (
        f"backup {NEW}: sha256 mismatch in etcd-snapshot.db (SHA256SUMS on master1); nothing was changed"
        in err
    )
    # the cd, the snapshot's form and the check in one shell (one round trip), whose script is
    # constant: the directory and the snapshot's name are its arguments
    assert master.commands[1] == [
        "sh", "-c", 'cd -- "$1" || exit 0; if test -e "$2"; then echo snapshot=encrypted; else echo '
        'snapshot=clear; fi; sha256sum --strict --quiet -c SHA256SUMS 2>&1; true', "sh", f"{ROOT}/{NEW}",
        "etcd-snapshot.db.age",
    ]  # fmt: skip
    assert len(master.commands) == 2  # the listing, then that one check


def test_an_unreachable_master_is_one_line(site, capsys, monkeypatch) -> None:
    def unreachable(cfg, node, command, timeout=60):  # type: ignore[no-untyped-def]
        raise Unreachable(
            f"{node.name} ({node.address}): SSH cannot connect: No route to host", hint="check it"
        )

    monkeypatch.setattr(backups, "run_on", unreachable)
    monkeypatch.setattr(restore_cmd, "run_playbook", _no_playbook)
    assert main(["restore", "--site", str(site), "--yes"]) == Unreachable.exit_code
    err = capsys.readouterr().err
    assert "master1 (192.168.10.11): SSH cannot connect: No route to host" in err and "Traceback" not in err


def test_without_yes_it_says_what_will_happen_and_asks(site, capsys, monkeypatch) -> None:
    monkeypatch.setattr(backups, "run_on", FakeMaster())
    monkeypatch.setattr(restore_cmd, "run_playbook", _no_playbook)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["restore", "--site", str(site), "--backup", OLD]) == 2
    cap = capsys.readouterr()
    assert f"restore from backup {OLD} (master1:{ROOT}/{OLD}):" in cap.out
    assert re.search(r"new etcd data dir, /var/lib/etcd-restore-\d{8}T\d{6}Z; the live one is kept", cap.out)
    assert "not restoring without confirmation" in cap.err


def test_the_playbook_gets_the_backup_and_the_result_is_printed(site, capsys, monkeypatch) -> None:
    state = {"backup": OLD, "phase": "done", "data_dir": "/var/lib/etcd-restore-X", "old_data_dir": "/var/lib/etcd",
             "snapshot": {"revision": 812, "totalKey": 301}, "nodes": ["master1", "gpu1"]}  # fmt: skip
    monkeypatch.setattr(backups, "run_on", FakeMaster(state=state))
    seen = {}

    class Result:
        ok, recap, artifact_dir = True, {}, "/tmp/x"

    def playbook(runner, cfg, name, opts, progress, extravars):  # type: ignore[no-untyped-def]
        seen.update(extravars, playbook=name)
        return Result()

    monkeypatch.setattr(restore_cmd, "run_playbook", playbook)
    monkeypatch.setattr(restore_cmd, "make_runner", lambda: None)
    monkeypatch.setattr(restore_cmd, "print_recap", lambda r: None)
    # the lock is taken on the master over SSH: never towards the example's (a real site's) addresses
    monkeypatch.setattr(restore_cmd.sitelock, "site_lock", lambda cfg, what: contextlib.nullcontext())
    assert main(["restore", "--site", str(site), "--backup", OLD, "--yes"]) == 0
    assert seen["playbook"] == "restore.yml" and seen["etcd_restore_backup"] == OLD
    assert re.fullmatch(r"\d{8}T\d{6}Z", seen["etcd_restore_name"])
    out = capsys.readouterr().out
    assert f"restored backup {OLD} on master1: etcd revision 812, 301 keys; nodes Ready: master1, gpu1" in out
    assert "the data dir it replaced is kept: master1:/var/lib/etcd" in out


def test_an_unfinished_restore_is_finished_and_one_of_another_backup_refused() -> None:
    assert restoreplan.unfinished(EtcdRestore(), OLD) is None
    assert restoreplan.unfinished(EtcdRestore(backup=NEW, phase="done", data_dir="/x"), OLD) is None
    mid = EtcdRestore(backup=OLD, phase="restored", data_dir="/var/lib/etcd-restore-1")
    assert restoreplan.unfinished(mid, OLD) == "/var/lib/etcd-restore-1"
    with pytest.raises(ApplianceError) as e:
        restoreplan.unfinished(mid, NEW)
    assert e.value.message == f"an unfinished restore from backup {OLD} is on the master (phase restored)"
    assert e.value.hint == f"finish it first: appliance restore --backup {OLD} --yes"


def test_a_resumed_restore_names_the_dir_it_finishes(site, capsys, monkeypatch) -> None:
    mid = {"backup": OLD, "phase": "stopping", "data_dir": "/var/lib/etcd-restore-20261125T000000Z"}
    monkeypatch.setattr(backups, "run_on", FakeMaster(state=mid))
    monkeypatch.setattr(restore_cmd, "run_playbook", _no_playbook)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["restore", "--site", str(site), "--backup", OLD]) == 2
    out = capsys.readouterr().out
    assert "new etcd data dir, /var/lib/etcd-restore-20261125T000000Z; the live one is kept" in out
    assert f"an unfinished restore of {OLD} is on master1" in out


# Bech32's alphabet, upper case, to the length of a key: the shape of age-keygen's output.
IDENTITY_KEY = "AGE-SECRET-KEY-1" + ("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" * 2)[:58]


def _identity(tmp_path: Path, text: str | None = None) -> Path:
    f = tmp_path / "backup-identity.txt"
    f.write_text(
        text
        if text is not None
        else f"# created: 2026-11-30T10:10:21Z\n# public key: age1x\n{IDENTITY_KEY}\n"
    )
    return f


def test_an_encrypted_backup_without_an_identity_is_refused_before_anything(
    site, capsys, monkeypatch
) -> None:
    master = FakeMaster(encrypted=True)
    monkeypatch.setattr(backups, "run_on", master)
    monkeypatch.setattr(restore_cmd, "run_playbook", _no_playbook)
    assert main(["restore", "--site", str(site), "--yes"]) == 1
    err = capsys.readouterr().err
    assert (
        f"backup {NEW}: its snapshot is encrypted (etcd-snapshot.db.age) and no identity was given; "
        "nothing was changed" in err
    )
    assert "appliance restore --identity FILE" in err and "Traceback" not in err
    assert all(c[:2] == ["sh", "-c"] and c[2].split()[0] in ("ls", "cd", "if") for c in master.commands)


@pytest.mark.parametrize(
    "text, why",
    [
        ("not a key\n", "not an age identity file"),
        ("# only comments\n", "not an age identity file"),
        (IDENTITY_KEY[:-1] + "\n", "not an age identity file"),
        (IDENTITY_KEY.lower() + "\n", "not an age identity file"),
        (None, "no such file"),
    ],
)
def test_an_identity_file_that_is_none_is_refused_naming_it_and_never_shown(
    site, tmp_path, capsys, monkeypatch, text, why
) -> None:
    monkeypatch.setattr(backups, "run_on", lambda *a, **k: pytest.fail("the master was asked"))
    path = _identity(tmp_path, text) if text is not None else tmp_path / "missing.txt"
    assert main(["restore", "--site", str(site), "--identity", str(path), "--yes"]) == 2
    err = capsys.readouterr().err
    assert f"--identity {path}: {why}" in err and "Traceback" not in err
    assert len([ln for ln in err.splitlines() if ln.startswith("error")]) == 1
    if text:
        assert text.strip() not in err


def test_an_encrypted_backup_gets_the_identitys_path_never_its_key(
    site, tmp_path, capsys, monkeypatch
) -> None:
    state = {"backup": NEW, "phase": "done", "data_dir": "/var/lib/etcd-restore-X", "old_data_dir": "/var/lib/etcd",
             "snapshot": {"revision": 9, "totalKey": 3}, "nodes": ["master1"]}  # fmt: skip
    monkeypatch.setattr(backups, "run_on", FakeMaster(state=state, encrypted=True))
    seen = {}

    class Result:
        ok, recap, artifact_dir = True, {}, "/tmp/x"

    def playbook(runner, cfg, name, opts, progress, extravars):  # type: ignore[no-untyped-def]
        seen.update(extravars)
        return Result()

    monkeypatch.setattr(restore_cmd, "run_playbook", playbook)
    monkeypatch.setattr(restore_cmd, "make_runner", lambda: None)
    monkeypatch.setattr(restore_cmd, "print_recap", lambda r: None)
    monkeypatch.setattr(restore_cmd.sitelock, "site_lock", lambda cfg, what: contextlib.nullcontext())
    ident = _identity(tmp_path)
    assert main(["restore", "--site", str(site), "--identity", str(ident), "--yes"]) == 0
    assert seen["etcd_restore_identity_file"] == str(ident.resolve())
    assert IDENTITY_KEY not in json.dumps(seen)
    out = capsys.readouterr().out
    assert "decrypt its etcd snapshot on the master with --identity" in out and IDENTITY_KEY not in out


def _copied(tmp_path: Path, name: str = "20261130T120000Z") -> Path:
    d = tmp_path / name
    d.mkdir(parents=True)
    for f, data in {"etcd-snapshot.db.age": b"age snapshot", "secrets.tar.age": b"age secrets",
                    "helm-releases.json": b"[]"}.items():  # fmt: skip
        (d / f).write_bytes(data)
    sums = subprocess.run(["sha256sum", *sorted(p.name for p in d.iterdir())], cwd=d, capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    (d / "SHA256SUMS").write_text(sums)
    return d


def test_a_copied_off_backup_is_checked_whole_on_the_controller(tmp_path: Path) -> None:
    d = _copied(tmp_path)
    ok = backups.check_copied_backup(str(d))
    assert (ok.name, ok.files) == (d.name, ["etcd-snapshot.db.age", "helm-releases.json", "secrets.tar.age"])
    (d / "secrets.tar.age").write_bytes(b"age secrets!")
    with pytest.raises(ApplianceError, match=rf"backup {d.name}: sha256 mismatch in secrets\.tar\.age"):
        backups.check_copied_backup(str(d))
    (d / "secrets.tar.age").unlink()
    with pytest.raises(ApplianceError, match=r"secrets\.tar\.age is listed in SHA256SUMS but missing"):
        backups.check_copied_backup(str(d))
    old = _copied(tmp_path / "old")
    (old / "secrets.tar.age").unlink()
    (old / "SHA256SUMS").write_text(
        "".join(ln + "\n" for ln in (old / "SHA256SUMS").read_text().splitlines() if "secrets" not in ln)
    )
    with pytest.raises(ApplianceError, match=r"no secrets\.tar\.age in it: it cannot rebuild a master"):
        backups.check_copied_backup(str(old))
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ApplianceError, match="'elsewhere' is not a backup's name"):
        backups.check_copied_backup(str(tmp_path / "elsewhere"))
    evil = _copied(tmp_path / "evil")
    (evil / "SHA256SUMS").write_text(f"{'0' * 64}  ../../etc/shadow\n")
    with pytest.raises(ApplianceError, match="not a line sha256sum writes"):
        backups.check_copied_backup(str(evil))


def test_rebuild_master_checks_the_copy_first_refuses_a_live_master_then_runs_three_playbooks(
    site, tmp_path, capsys, monkeypatch
) -> None:
    from appliance_cli.cli import rebuild_cmd

    ident = _identity(tmp_path)
    copy = _copied(tmp_path / "off", NEW)
    monkeypatch.setattr(rebuild_cmd.knownhosts, "require_host_keys", lambda cfg: None)
    # the lock is taken on the master over SSH: never towards the example's (a real site's) addresses
    monkeypatch.setattr(rebuild_cmd.sitelock, "site_lock", lambda cfg, what: contextlib.nullcontext())

    class Gate:
        extravars, summary, warning = {"appliance_bundle_manifest_sha256": "f" * 64}, "bundle verified", ""

    monkeypatch.setattr(rebuild_cmd.bundlegate, "check", lambda cfg, bundle=None, key=None: Gate())
    monkeypatch.setattr(rebuild_cmd, "make_runner", lambda: None)
    monkeypatch.setattr(rebuild_cmd, "print_recap", lambda r: None)
    asked: list[list[str]] = []

    def master(answer: str):  # type: ignore[no-untyped-def]
        def run_on(cfg, node, command, timeout=60):  # type: ignore[no-untyped-def]
            asked.append(command)
            if command[:2] == ["sh", "-c"] and command[4] == "/etc/kubernetes/admin.conf":
                return answer
            if "cat " in command[2] and command[4] == restore_cmd.STATE_FILE:
                state = {"backup": NEW, "phase": "done", "data_dir": "/var/lib/etcd-restore-X",
                         "old_data_dir": "/var/lib/etcd", "snapshot": {"revision": 9, "totalKey": 3},
                         "nodes": ["master1", "gpu1"]}  # fmt: skip
                return json.dumps({"schema": 1, "etcd_restore": state})
            raise AssertionError(command)

        return run_on

    args = ["rebuild-master", "--site", str(site), "--from", str(copy), "--identity", str(ident), "--yes"]
    monkeypatch.setattr(rebuild_cmd, "run_playbook", _no_playbook)
    monkeypatch.setattr(rebuild_cmd, "install", _no_playbook)
    # a damaged copy: refused on the controller, before any SSH
    (copy / "etcd-snapshot.db.age").write_bytes(b"damaged")
    monkeypatch.setattr(backups, "run_on", master("no\n"))
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"backup {NEW}: sha256 mismatch in etcd-snapshot.db.age" in err and not asked
    copy = _copied(tmp_path / "off2", NEW)
    args[args.index("--from") + 1] = str(copy)
    # a master that runs a cluster: refused, nothing run
    monkeypatch.setattr(backups, "run_on", master("yes\n"))
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "master1 already has a control plane (/etc/kubernetes/admin.conf)" in err
    assert f"appliance restore --backup {NEW} --identity FILE" in err
    # a fresh master: the secrets and Kubernetes on it alone, the restore, then a whole install
    monkeypatch.setattr(backups, "run_on", master("no\n"))
    runs: list[tuple[str, str | None, dict]] = []

    class Result:
        ok, recap, artifact_dir, changed_total = True, {}, "/tmp/x", 0

    def playbook(runner, cfg, name, opts, progress, extravars):  # type: ignore[no-untyped-def]
        runs.append((name, opts.limit, dict(extravars)))
        return Result()

    def install(runner, cfg, opts, progress, extravars=None):  # type: ignore[no-untyped-def]
        return playbook(runner, cfg, "site.yml", opts, progress, extravars or {})

    monkeypatch.setattr(rebuild_cmd, "run_playbook", playbook)
    monkeypatch.setattr(rebuild_cmd, "install", install)
    assert main(args) == 0
    assert [(n, lim) for n, lim, _ in runs] == [("rebuild-master.yml", "master1"), ("restore.yml", None),
                                                ("site.yml", None)]  # fmt: skip
    first, restore = runs[0][2], runs[1][2]
    assert first["etcd_restore_source_dir"] == str(copy) and first["etcd_restore_backup"] == NEW
    assert (
        first["etcd_restore_identity_file"] == str(ident.resolve()) == restore["etcd_restore_identity_file"]
    )
    assert first["appliance_bundle_manifest_sha256"] == "f" * 64
    out = capsys.readouterr().out
    assert f"restored backup {NEW} on master1: etcd revision 9, 3 keys; nodes Ready: master1, gpu1" in out


@pytest.mark.parametrize(
    ("admin_conf", "rebuild", "outcome"),
    [
        ("no", {}, False),  # a fresh master
        (
            "yes",
            {"backup": NEW, "phase": "secrets"},
            True,
        ),  # this rebuild, failed after its secrets: finished
        ("yes", {}, "a master is rebuilt only on a fresh machine"),  # a running cluster
        (
            "yes",
            {"backup": OLD, "phase": "secrets"},
            "a master is rebuilt only on a fresh machine",
        ),  # another's
        ("yes", {"backup": NEW, "phase": "done"}, f"rebuilt from backup {NEW} and restored"),
    ],
)
def test_a_rebuild_runs_on_a_fresh_master_or_finishes_its_own(
    site, monkeypatch, tmp_path, admin_conf, rebuild, outcome
) -> None:
    from appliance_cli.core.siteconfig import load_site

    # the master as files under tmp_path; the command itself runs (one round trip: it is asked once)
    conf, state = tmp_path / "admin.conf", tmp_path / "state.json"
    if admin_conf == "yes":
        conf.write_text("kubeconfig\n")
    state.write_text(json.dumps({"schema": 1, "rebuild_master": rebuild}))
    asked: list[list[str]] = []

    def run_on(cfg, node, command, timeout=60):  # type: ignore[no-untyped-def]
        asked.append(command)
        assert command[4:] == ["/etc/kubernetes/admin.conf", restore_cmd.STATE_FILE], command
        local = [*command[:4], str(conf), str(state)]
        return subprocess.run(local, capture_output=True, text=True, check=True).stdout

    monkeypatch.setattr(backups, "run_on", run_on)
    cfg = load_site(site)
    if isinstance(outcome, bool):
        assert backups.refuse_live_master(cfg, NEW) is outcome
        assert len(asked) == 1
        return
    with pytest.raises(ApplianceError, match=outcome) as e:
        backups.refuse_live_master(cfg, NEW)
    assert "nothing was changed" in e.value.message
    assert ("appliance install" in e.value.hint) is (rebuild.get("phase") == "done")
