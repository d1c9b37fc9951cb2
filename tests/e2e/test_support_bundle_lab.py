"""`appliance support-bundle` on the installed lab: the archive holds every node's journal and the
cluster's state, and not one secret the site holds — the registry pull password, the bootstrap
tokens the cluster knows, any private key on the master, the site's ssh key — in any file."""

from __future__ import annotations

import re
import subprocess
import tarfile

import pytest

pytestmark = pytest.mark.usefixtures("installs")


def _secrets(site, hosts) -> dict[str, str]:
    master = hosts[site.master.name]
    found = {}
    for path in master.check_output("find /etc/appliance -type f -name '*password*'").split():
        found[path] = master.check_output(f"cat {path}").strip()
    tokens = master.check_output("kubeadm token list 2>/dev/null || true")
    for t in re.findall(r"[a-z0-9]{6}\.[a-z0-9]{16}", tokens):
        found[f"token {t[:6]}"] = t
    for path in master.check_output("find /etc/appliance /etc/kubernetes/pki -type f -name '*.key'").split():
        body = [ln for ln in master.check_output(f"cat {path}").splitlines() if ln and "-----" not in ln]
        found[path] = max(body, key=len)  # the longest base64 line of the key
    if site.ssh.private_key:
        lines = site.resolve(site.ssh.private_key).read_text().splitlines()
        found["ssh key"] = max((ln for ln in lines if "-----" not in ln), key=len)
    return found


def test_the_support_bundle_holds_no_secret_of_the_site(site, hosts, cli, tmp_path):
    r = cli("support-bundle", "--site", str(site.site_dir), "--out", str(tmp_path))
    assert r.rc == 0, r.err
    archive = next(tmp_path.glob("appliance-support-*.tar.gz"))
    assert archive.stat().st_mode & 0o777 == 0o600
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        blob = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())  # type: ignore[union-attr]
    for node in site.nodes:
        assert f"support/nodes/{node.name}/journal.txt" in names
    assert "support/nodes/" + site.master.name + "/kubectl-nodes.json" in names
    assert any(n.startswith("support/runs/") for n in names)
    secrets = _secrets(site, hosts)
    assert any("password" in k for k in secrets) and any(k.endswith(".key") for k in secrets)
    leaked = [name for name, value in secrets.items() if value.encode() in blob]
    assert leaked == [], f"in the support bundle: {leaked}"
    # and an independent grep, as a reviewer would run it
    listing = subprocess.run(["tar", "-xzOf", str(archive)], capture_output=True, check=True).stdout
    assert not re.search(rb"BEGIN [A-Z ]*PRIVATE KEY-----\n[A-Za-z0-9+/]", listing)
