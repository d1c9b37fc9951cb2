"""Backups hold the cluster's secrets, so they are written only encrypted: `appliance backup`
refuses a site without backup.recipient before anything runs, the site config refuses a value
that is no age recipient, and the role archives the PKI and the toolkit's secrets and encrypts
them and the snapshot (read from the role's tasks: the lab test runs them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from appliance_cli.cli import backup_cmd
from appliance_cli.cli.main import main
from appliance_cli.core import agekeys
from appliance_cli.core.inventory import render_inventory
from appliance_cli.core.paths import PATHS
from appliance_cli.core.siteconfig import load_site, parse_site

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "example" / "appliance.yml"
# Generated with age-keygen 1.1.1 (the public half only: nothing opens with it).
RECIPIENT = "age1ax72m94lxdkarag28402qwl6fv9l09yrwzft2s9hjnlxzu9rhugqe9ksgt"


def _site(tmp_path: Path, backup: dict | None) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    if backup is not None:
        data["backup"] = backup
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    return tmp_path


def test_a_site_without_a_recipient_gets_no_backup_and_is_told_how(tmp_path, capsys, monkeypatch) -> None:
    site = _site(tmp_path, None)
    monkeypatch.setattr(backup_cmd, "run_playbook", lambda *a, **k: pytest.fail("the playbook ran"))
    monkeypatch.setattr(backup_cmd.sitelock, "site_lock", lambda *a: pytest.fail("the master was asked"))
    assert main(["backup", "--site", str(site)]) == 2
    err = capsys.readouterr().err
    assert f"backup.recipient: not set in {site / 'appliance.yml'}" in err
    assert "age-keygen -o backup-identity.txt" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "value",
    ["age1bad", RECIPIENT[:-1], RECIPIENT + "q", RECIPIENT.upper(), RECIPIENT.replace("q", "b"),
     RECIPIENT + "\nx", "ssh-ed25519 AAAA"],
)  # fmt: skip
def test_a_recipient_that_is_no_age_key_is_refused_naming_the_field(tmp_path, value) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["backup"] = {"recipient": value}
    with pytest.raises(Exception) as e:
        parse_site(data, source=tmp_path / "appliance.yml")
    assert "backup.recipient" in str(e.value) and "is not an age recipient" in str(e.value)


def test_the_recipient_reaches_the_roles_as_data(tmp_path) -> None:
    site = _site(tmp_path, {"recipient": RECIPIENT})
    cfg = load_site(site / "appliance.yml")
    gv = yaml.safe_load(render_inventory(cfg, tmp_path / "inv").group_vars_file.read_text())
    assert gv["appliance_backup_recipient"] == RECIPIENT
    assert agekeys.recipient_problem(RECIPIENT) is None


def test_the_role_encrypts_the_snapshot_and_the_secrets_and_keeps_no_clear_copy() -> None:
    tasks = yaml.safe_load((ROOT / "roles/cluster_backup/tasks/main.yml").read_text())
    block = next(t for t in tasks if "block" in t)
    names = [t["name"] for t in block["block"]]
    encrypt = next(t for t in block["block"] if t["name"].startswith("Backup | Encrypt"))
    assert encrypt["loop"] == ["etcd-snapshot.db", "secrets.tar"]
    argv = encrypt["ansible.builtin.command"]["argv"]
    assert argv[1:4] == ["--encrypt", "--recipient", "{{ cluster_backup_recipient }}"]
    assert argv[5] == "{{ _dir }}/{{ item }}.age" and argv[6] == "{{ _work }}/{{ item }}"
    # the snapshot and the values go to the work dir, never to the backup's own
    snap = next(t for t in block["block"] if t["name"] == "Backup | Save the etcd snapshot")
    assert snap["vars"]["etcd_snapshot_dir"] == "{{ _work }}"
    values = next(t for t in block["block"] if t["name"] == "Backup | Keep each release's values")
    assert "_work ~ '/helm-values/'" in values["ansible.builtin.shell"]["cmd"] and values["no_log"] is True
    assert names.index("Backup | Write the sha256 sums") == len(names) - 1
    (cleanup,) = block["always"]
    assert cleanup["ansible.builtin.file"] == {"path": "{{ _work }}", "state": "absent"}
    defaults = yaml.safe_load((ROOT / "roles/cluster_backup/defaults/main.yml").read_text())
    assert defaults["cluster_backup_secrets"] == ["/etc/kubernetes/pki", "/etc/appliance"]
    assert not (defaults["cluster_backup_work_root"] + "/").startswith(PATHS.backups + "/")
