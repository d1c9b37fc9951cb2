"""The lab's NFS filer (master1's nfs-ganesha): what it writes and how a failure reads."""

import re
import subprocess

import pytest

from appliance_cli.errors import LabError
from appliance_cli.lab import filer, sitegen
from appliance_cli.lab.layout import LabLayout


def _export_block(conf: str) -> str:
    m = re.search(r"^EXPORT \{\n(.*?)^\}", conf, re.S | re.M)
    assert m, conf
    return m.group(1)


@pytest.mark.parametrize(("read_only", "access"), [(False, "RW"), (True, "RO")])
def test_one_export_of_the_path_root_not_squashed(read_only: bool, access: str) -> None:
    export = _export_block(filer.ganesha_config("/srv/nfs/x", read_only))
    assert 'Path = "/srv/nfs/x";' in export
    assert 'Pseudo = "/srv/nfs/x";' in export
    assert f"Access_Type = {access};" in export
    assert "Squash = No_Root_Squash;" in export
    assert "Protocols = 3, 4;" in export
    assert re.search(r"FSAL \{\s*Name = VFS;", export)


def test_lab_site_exports_what_the_site_config_names(tmp_path) -> None:
    from appliance_cli.core.siteconfig import parse_site

    cfg = parse_site(sitegen.site_data(LabLayout("t1", tmp_path / "lab", tmp_path / "cache"), 2))
    assert cfg.nfs is not None and cfg.nfs.server == "10.77.0.11"  # master1: the filer runs there
    assert f'Path = "{cfg.nfs.path}";' in filer.ganesha_config(cfg.nfs.path)
    assert 'Pseudo = "/srv/a b;c";' in filer.ganesha_config("/srv/a b;c")


def test_setup_installs_from_the_lab_repo_and_leaves_no_apt_state_behind() -> None:
    script = filer.setup_script("http://10.77.0.1:8080/", "/srv/nfs/appliance")
    assert "deb [trusted=yes] http://10.77.0.1:8080/ ./" in script
    assert "nfs-ganesha nfs-ganesha-vfs" in script
    # its own source list, lists and cache: master1's apt (the bundle's, later) never sees them
    assert "Dir::Etc::sourceparts=-" in script and f"Dir::State::Lists={filer.APT_STATE}/lists" in script
    assert f"rm -rf {filer.APT_STATE}\n" in script
    assert "/etc/apt/sources.list" not in script


def test_scripts_are_valid_sh() -> None:
    for script in (
        filer.setup_script("http://10.77.0.1:8080/", "/srv/a b"),
        filer.apply_config_script("/p", True),
    ):
        r = subprocess.run(["sh", "-n"], input=script, text=True, capture_output=True)
        assert r.returncode == 0, r.stderr


def test_a_failure_is_one_line_naming_master1(tmp_path) -> None:
    fake = tmp_path / "fake-ssh"
    fake.write_text(
        "#!/bin/sh\ncat >/dev/null\necho 'E: Unable to locate package nfs-ganesha' >&2\nexit 100\n"
    )
    fake.chmod(0o755)
    with pytest.raises(LabError) as exc:
        filer.run_on_master([str(fake)], "true", "NFS filer (nfs-ganesha) setup")
    assert (
        exc.value.message
        == "master1: NFS filer (nfs-ganesha) setup failed: E: Unable to locate package nfs-ganesha"
    )
