"""cluster_backup on the installed lab's master (backup named "molecule"), read back (testinfra):
the snapshot and the secrets encrypted to the lab's recipient, opened on the controller with the
lab's identity (its site directory), as an operator would."""

import base64
import io
import json
import subprocess
import tarfile

from appliance_cli.lab.layout import LabLayout

WHERE = "/var/lib/appliance/backups/molecule"
KUBECONFIG = "/etc/kubernetes/admin.conf"


def _fetch(host, path: str) -> bytes:
    return base64.b64decode(host.check_output(f"base64 -w0 {path}"))


def _open(host, name: str) -> bytes:
    """age --decrypt on the controller with the lab's identity (site/backup-identity.txt)."""
    identity = LabLayout.default().site_dir / "backup-identity.txt"
    out = subprocess.run(
        ["age", "--decrypt", "--identity", str(identity)], input=_fetch(host, f"{WHERE}/{name}"),
        capture_output=True, check=False, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_backup_is_root_only_and_its_sums_check(host):
    d = host.file(WHERE)
    assert d.is_directory and d.user == "root" and d.mode == 0o700
    modes = host.check_output(f"find {WHERE} -type f -printf '%m %P\\n'").splitlines()
    assert modes and all(line.startswith("600 ") for line in modes), modes
    assert host.run(f"cd {WHERE} && sha256sum --quiet -c SHA256SUMS").rc == 0


def test_only_the_encrypted_files_hold_the_snapshot_and_the_secrets(host):
    files = sorted(host.check_output(f"find {WHERE} -type f -printf '%P\\n'").splitlines())
    assert files == [
        "SHA256SUMS", "etcd-snapshot.db.age", "helm-releases.json", "kubeadm-cluster-configuration.yaml",
        "secrets.tar.age",
    ], files  # fmt: skip
    assert not host.file(f"/var/lib/appliance/backup-work/{WHERE.rsplit('/', 1)[1]}").exists


def test_the_etcd_snapshot_opens_with_the_labs_identity(host):
    # age authenticated every chunk; the e2e drill has etcdctl read and etcdutl restore it
    assert len(_open(host, "etcd-snapshot.db.age")) > 1024


def test_every_release_has_its_values_and_the_pki_is_kept(host):
    releases = json.loads(host.check_output(f"helm --kubeconfig {KUBECONFIG} list -A -o json"))
    assert releases, "the installed lab has helm releases"
    kept = json.loads(host.check_output(f"cat {WHERE}/helm-releases.json"))
    assert sorted(r["name"] for r in kept) == sorted(r["name"] for r in releases)
    with tarfile.open(fileobj=io.BytesIO(_open(host, "secrets.tar.age"))) as tar:
        for r in releases:
            live = host.check_output(
                f"helm --kubeconfig {KUBECONFIG} get values {r['name']} -n {r['namespace']} -o yaml"
            )
            kept_values = tar.extractfile(f"helm-values/{r['namespace']}_{r['name']}.yaml").read().decode()
            assert kept_values.rstrip("\n") == live.rstrip("\n")
        ca_key = tar.extractfile("etc/kubernetes/pki/ca.key").read()
        assert ca_key == _fetch(host, "/etc/kubernetes/pki/ca.key")
    assert "kubernetesVersion" in host.check_output(f"cat {WHERE}/kubeadm-cluster-configuration.yaml")
