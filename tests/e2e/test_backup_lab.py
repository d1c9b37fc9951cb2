"""`appliance backup` on the installed session lab: one root-only directory on the master with the
etcd snapshot and the secrets (cluster PKI, the registry's CA and passwords, every helm release's
values) encrypted with age to the site's backup.recipient, kubeadm's ClusterConfiguration and the
release list in clear, and sha256 sums that check. Opened on the controller with the lab's
identity (as an operator would, off the appliance): etcdutl (of etcd's image) reads the snapshot, the archive holds
the secrets as they are on the master. Then a grep of the backup directory for every secret the
lab holds (each key and password file's lines, each Secret's data in the cluster) finds none."""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import tarfile

import pytest
import yaml

from tests._support import agebackup

pytestmark = pytest.mark.usefixtures("installs")

ADMIN = "--kubeconfig /etc/kubernetes/admin.conf"
# The secrets a rebuilt master needs, as files on the master: private keys and passwords.
SECRET_FILES = (
    r"find /etc/kubernetes/pki /etc/appliance -type f "
    r"\( -name '*.key' -o -name '*password*' -o -name '*htpasswd*' -o -name '*token*' \) -print"
)


@pytest.fixture(scope="module")
def backup(site, cli):
    run = cli("backup", "--site", str(site.site_dir), timeout=600)
    assert run.rc == 0, run.out[-2000:] + run.err[-2000:]
    m = re.search(r"^backup on \S+: (/var/lib/appliance/backups/\S+) \((\d+) files", run.out, re.M)
    assert m, run.out[-2000:]
    print(f"--- appliance backup\n{run.out}")  # the record (-s)
    return run, m.group(1), int(m.group(2))


@pytest.fixture(scope="module")
def secrets_tar(site, hosts, backup) -> tarfile.TarFile:
    _, where, _ = backup
    data = agebackup.plaintext(
        agebackup.identity(site.site_dir), hosts[site.master.name], f"{where}/secrets.tar.age"
    )
    return tarfile.open(fileobj=io.BytesIO(data))


def test_the_backup_is_root_only_and_its_sums_check(site, hosts, backup):
    _, where, count = backup
    m = hosts[site.master.name]
    assert m.file(where).mode == 0o700 and m.file(where).user == "root"
    modes = m.check_output(f"find {where} -type f -printf '%m %P\\n'").splitlines()
    assert len(modes) == count + 1  # + SHA256SUMS
    assert all(line.startswith("600 ") for line in modes), modes
    assert m.run(f"cd {where} && sha256sum --quiet -c SHA256SUMS").rc == 0


def test_what_holds_secrets_is_encrypted_and_nothing_is_left_in_clear(site, hosts, backup):
    run, where, _ = backup
    m = hosts[site.master.name]
    files = sorted(m.check_output(f"find {where} -type f -printf '%P\\n'").splitlines())
    clear = ["SHA256SUMS", "helm-releases.json", "kubeadm-cluster-configuration.yaml"]
    if site.scheduler.stack == "runai":
        clear.append("runai-backend-volumes.json")
    assert files == sorted([*clear, "etcd-snapshot.db.age", "secrets.tar.age"]), files
    for f in ("etcd-snapshot.db.age", "secrets.tar.age"):
        assert m.check_output(f"head -c 22 {where}/{f}") == "age-encryption.org/v1", f
        assert f"  {f}  (encrypted to backup.recipient)" in run.out
    # the work dir where they waited in clear is gone
    assert m.check_output("ls -A /var/lib/appliance/backup-work") == ""


def _to_master(site, ssh_config, path: str, data: bytes) -> None:
    """`data` into a root-only file on the master (over ssh's stdin: no argument holds it)."""
    cmd = f"sudo sh -c {shlex.quote(f'umask 077; cat > {path}')}"
    res = subprocess.run(
        ["ssh", "-F", str(ssh_config), site.master.name, cmd], input=data, capture_output=True, timeout=120
    )
    assert res.returncode == 0, res.stderr


def test_the_snapshot_opens_with_the_identity_and_etcdutl_reads_it(site, hosts, ssh_config, backup):
    """Decrypted on the controller, put back on the master and read by etcdutl of the image etcd's
    static pod runs (the lab's carries the official 3.5.1 build), as etcd_restore reads it."""
    _, where, _ = backup
    m = hosts[site.master.name]
    snap = agebackup.plaintext(agebackup.identity(site.site_dir), m, f"{where}/etcd-snapshot.db.age")
    back = "/root/appliance-e2e-snapshot/etcd-snapshot.db"
    image = yaml.safe_load(m.file("/etc/kubernetes/manifests/etcd.yaml").content_string)["spec"][
        "containers"
    ][0]["image"]
    etcdutl = (f"ctr -n k8s.io run --rm --mount type=bind,src=/root/appliance-e2e-snapshot,"
               f"dst=/root/appliance-e2e-snapshot,options=rbind:ro {image} appliance-e2e-snapshot-status etcdutl")  # fmt: skip
    try:
        assert m.run("mkdir -p -m 700 /root/appliance-e2e-snapshot").rc == 0
        _to_master(site, ssh_config, back, snap)
        status = json.loads(m.check_output(f"{etcdutl} snapshot status {back} -w json"))
    finally:
        m.run("rm -rf /root/appliance-e2e-snapshot")
    assert status["revision"] > 0 and status["totalKey"] > 0, status


def test_the_secrets_archive_holds_the_pki_the_toolkits_secrets_and_every_releases_values(
    site, hosts, backup, secrets_tar
):
    m = hosts[site.master.name]
    names = set(secrets_tar.getnames())
    for f in m.check_output(SECRET_FILES).split():
        member = f.lstrip("/")
        assert member in names, f"{f} is not in secrets.tar.age"
        assert secrets_tar.extractfile(member).read() == agebackup.fetch(m, f), f
    for must in ("etc/kubernetes/pki/ca.key", "etc/kubernetes/pki/etcd/ca.key", "etc/appliance/pki"):
        assert must in names, must
    releases = json.loads(m.check_output(f"helm {ADMIN} list -A -o json"))
    assert releases, "no helm release to back up"
    for r in releases:
        live = m.check_output(f"helm {ADMIN} get values {r['name']} -n {r['namespace']} -o yaml")
        kept = secrets_tar.extractfile(f"helm-values/{r['namespace']}_{r['name']}.yaml").read().decode()
        assert kept.rstrip("\n") == live.rstrip("\n"), r["name"]


def test_no_secret_the_lab_holds_is_in_the_backup_in_clear(site, hosts, ssh_config, backup):
    run, where, _ = backup
    m = hosts[site.master.name]
    needles: dict[str, str] = {}
    for f in m.check_output(SECRET_FILES).split():
        for line in m.check_output(f"cat {f}").splitlines():
            if len(line) >= 16 and not line.startswith("-----"):
                needles[line] = f
    secrets = json.loads(m.check_output(f"kubectl {ADMIN} get secrets -A -o json"))["items"]
    for s in secrets:
        for key, value in (s.get("data") or {}).items():
            if len(value) >= 16:
                needles[value] = f"Secret {s['metadata']['namespace']}/{s['metadata']['name']} {key}"
    assert len({v for v in needles.values() if v.startswith("/")}) >= 5, needles.values()
    assert any(v.startswith("Secret ") for v in needles.values()), "the lab holds no Secret"
    # one grep for all of them, on the master: each string that occurs anywhere in the backup; the
    # same grep over where they live in clear (the files, etcd's data dir) must find them, or it
    # proves nothing
    listed = "/root/appliance-e2e-needles.txt"
    manifest = m.check_output("cat /etc/kubernetes/manifests/etcd.yaml")
    data_dir = re.search(r"--data-dir=(\S+)", manifest).group(1)
    try:
        _to_master(site, ssh_config, listed, "".join(f"{n}\n" for n in needles).encode())
        # -a: a match in a binary file (the encrypted files, etcd's bbolt file and WAL) is printed, not
        # "binary file matches" (which the comparison below would not see)
        hits = m.run(f"grep -rhoaF -f {listed} {where}")
        control = m.run(f"grep -rhoaF -f {listed} /etc/kubernetes/pki /etc/appliance {data_dir}")
    finally:
        m.run(f"rm -f {listed}")
    assert hits.rc in (0, 1), hits.stderr  # 1: no line matched
    found = sorted({needles[h] for h in hits.stdout.splitlines() if h in needles})
    in_clear = {needles[h] for h in control.stdout.splitlines() if h in needles}
    print(
        f"--- grep of {where}: {len(needles)} secret strings from {len(set(needles.values()))} places, "
        f"found {found}; the same grep finds {len(in_clear)} of those places in clear on the master"
    )
    assert any(w.startswith("/") for w in in_clear), control.stdout[-500:]
    assert any(w.startswith("Secret ") for w in in_clear), f"no Secret found in clear in {data_dir}"
    assert found == []
    assert not [n for n in needles if n in run.out + run.err]
