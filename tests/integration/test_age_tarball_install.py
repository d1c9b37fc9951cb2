"""cluster_backup's tasks/age.yml on its production path, run by Ansible against localhost: a
release tarball shaped like upstream's age-v1.1.1-linux-amd64.tar.gz (age/age, age/age-keygen,
age/LICENSE; the age inside is this machine's real one) downloaded over loopback HTTP, checked
against the bundle's sha256, unpacked and installed; the installed age encrypts and decrypts; a
re-run changes nothing; a tarball unlike the bundle's sha256 is not installed. The lab runs the
single-executable path (Debian's build), so this is where the tarball path is proven."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from tests._support.bundle_server import served  # noqa: F401  (served: the fixture)
from tests._support.standin_localhost import localhost_changed

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOK = str(BIN / "ansible-playbook") if (BIN / "ansible-playbook").exists() else "ansible-playbook"
URL = "https://github.com/FiloSottile/age/releases/download/v1.1.1/age-v1.1.1-linux-amd64.tar.gz"


def _tarball() -> bytes:
    age, keygen = shutil.which("age"), shutil.which("age-keygen")
    assert age and keygen, "age is a host package (scripts/bootstrap.sh)"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, src, mode in (("age/age", age, 0o755), ("age/age-keygen", keygen, 0o755)):
            data = Path(src).read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("age/LICENSE")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"BSD\n"))
    return buf.getvalue()


def _run(
    tmp_path: Path, files_url: str, sha256: str, files: dict | None = None
) -> subprocess.CompletedProcess[str]:
    assert os.geteuid() == 0, "the tasks install files owned by root"
    play = [{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "tasks": [{"ansible.builtin.include_role": {"name": "cluster_backup", "tasks_from": "age"}}],
    }]  # fmt: skip
    extra = {
        "appliance_files_url": files_url,
        "appliance_bundle_files": files
        if files is not None
        else {"age": {"sha256": sha256, "source_url": URL}},
        "cluster_backup_age_bin": str(tmp_path / "bin" / "age"),
        "cluster_backup_age_cache_dir": str(tmp_path / "cache"),
    }
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "extra.yml").write_text(yaml.safe_dump(extra))
    env = os.environ | {"ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1",
                        "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}  # fmt: skip
    return subprocess.run(
        [PLAYBOOK, "-i", "localhost,", str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'extra.yml'}"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def test_the_upstream_tarball_is_unpacked_installed_works_and_is_left_alone_after(tmp_path, served):  # noqa: F811
    files, url = served
    data = _tarball()
    (files / "age").write_bytes(data)
    first = _run(tmp_path, url, hashlib.sha256(data).hexdigest())
    assert first.returncode == 0, first.stdout[-3000:]
    age = tmp_path / "bin" / "age"
    assert age.is_file() and os.access(age, os.X_OK)
    assert localhost_changed(first.stdout) >= 3  # cache dir, tarball, unpacked and installed age
    assert not (tmp_path / "bin" / "age-keygen").exists()  # only what backups use
    ident = tmp_path / "id.txt"
    subprocess.run(["age-keygen", "-o", str(ident)], check=True, capture_output=True)
    recipient = subprocess.run(["age-keygen", "-y", str(ident)], check=True, capture_output=True, text=True)
    sealed = subprocess.run(
        [age, "-r", recipient.stdout.strip()], input=b"etcd", capture_output=True, check=True
    ).stdout
    assert sealed.startswith(b"age-encryption.org/v1\n")
    opened = subprocess.run([age, "-d", "-i", str(ident)], input=sealed, capture_output=True, check=True)
    assert opened.stdout == b"etcd"
    again = _run(tmp_path, url, hashlib.sha256(data).hexdigest())
    assert again.returncode == 0 and localhost_changed(again.stdout) == 0, again.stdout[-3000:]


def test_a_tarball_unlike_the_bundle_checksum_is_not_installed(tmp_path, served):  # noqa: F811
    files, url = served
    (files / "age").write_bytes(_tarball())
    run = _run(tmp_path, url, "0" * 64)
    assert run.returncode != 0 and "checksum" in run.stdout.lower()
    assert not (tmp_path / "bin" / "age").exists()


def test_a_bundle_without_age_is_refused_naming_what_it_has(tmp_path, served):  # noqa: F811
    _, url = served
    run = _run(tmp_path, url, "0" * 64, files={"helm": {"sha256": "0" * 64}})
    assert run.returncode != 0
    assert "the bundle has no 'age' file artifact (it has: helm)" in " ".join(run.stdout.split())
