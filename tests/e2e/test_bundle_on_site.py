"""Issue 3 on site: the nodes install packages from the master's bundle repository, pull images by
digest from the master's registry over TLS with auth, and anonymous pushes are refused; `appliance
install` refuses a corrupted or unsigned bundle before touching any node. Runs unchanged against
a real site (APPLIANCE_E2E_SITE) except the tests that need the lab's bundle on this host."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("installs")


def _worker(site):
    workers = [n for n in site.nodes if "master" not in n.roles]
    return (workers or site.nodes)[-1].name


def _busybox(site, hosts) -> tuple[str, str]:
    """(repository in the private registry, manifest digest) of a seeded image, from the master's copy."""
    raw = hosts[site.master.name].check_output(f"cat {shlex.quote(site.bundle.path)}/manifest.json")
    images = [a for a in json.loads(raw)["artifacts"] if a["kind"] == "oci-image"]
    img = next((a for a in images if a["name"] == "busybox"), images[0])["image"]
    ref = img["reference"].rsplit("@", 1)[0]
    host, _, rest = ref.partition("/")
    repo = rest if ("." in host or ":" in host or host == "localhost") else ref
    return repo.rsplit(":", 1)[0], img["manifest_digest"]


def test_worker_installs_a_package_from_the_masters_bundle_repository(site, hosts):
    w = hosts[_worker(site)]
    w.run("apt-get remove -y -q jq")  # may not be installed; the install below must fetch it
    r = w.run("apt-get update -q && apt-get install -y -q jq")
    assert r.rc == 0, r.stderr[-2000:]
    assert w.package("jq").is_installed
    policy = w.check_output("apt-cache policy jq")
    assert f"http://{site.master.address}:" in policy, policy


def test_worker_pulls_by_digest_over_tls_with_auth_and_not_without(site, hosts):
    name = _worker(site)
    w = hosts[name]
    repo, digest = _busybox(site, hosts)
    ref = f"{site.registry.address}/{repo}@{digest}"
    # the pull credentials the container runtime was given (read on the node, never printed)
    creds = (
        "$(python3 -c \"import tomllib; c=tomllib.load(open('/etc/containerd/config.toml','rb'));"
        "a=c['plugins']['io.containerd.grpc.v1.cri']['registry']['configs']"
        f"['{site.registry.address}']['auth']; print(a['username']+':'+a['password'])\")"
    )
    hostsdir = "--hosts-dir /etc/containerd/certs.d"
    w.run("ctr -n e2e-pull images rm " + shlex.quote(ref))
    anon = w.run(f"ctr -n e2e-pull images pull {hostsdir} {shlex.quote(ref)}")
    assert anon.rc != 0 and "401" in (anon.stdout + anon.stderr), anon.stderr[-500:]
    ok = w.run(f'ctr -n e2e-pull images pull {hostsdir} --user "{creds}" {shlex.quote(ref)}')
    assert ok.rc == 0, ok.stderr[-1000:]
    listed = w.check_output("ctr -n e2e-pull images ls -q")
    assert ref in listed.split()
    w.run("ctr -n e2e-pull images rm " + shlex.quote(ref))


def test_registry_certificate_is_verified_with_the_site_ca(site, hosts):
    w = hosts[_worker(site)]
    url = f"https://{site.registry.address}/v2/"
    trusted = w.run(f"curl -sS -o /dev/null -w '%{{http_code}}' {url}")
    assert trusted.rc == 0 and trusted.stdout == "401", trusted.stderr  # TLS fine, auth required
    untrusted = w.run(f"curl -sS --cacert /dev/null --capath /nonexistent -o /dev/null {url}")
    assert untrusted.rc != 0  # not a publicly trusted certificate: only the site CA makes it valid


def test_anonymous_push_is_refused(site, hosts):
    w = hosts[_worker(site)]
    url = f"https://{site.registry.address}/v2/e2e/anonymous/blobs/uploads/"
    r = w.run(f"curl -sS -o /dev/null -w '%{{http_code}}' -X POST {url}")
    assert r.rc == 0 and r.stdout == "401", (r.stdout, r.stderr)


# -- the install gate (needs the lab bundle on this host) -------------------------------------------
@pytest.fixture
def bad_bundle(site, tmp_path) -> Path:
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("copies the lab's bundle: lab only")
    copy = tmp_path / "bundle"
    shutil.copytree(site.resolve(site.bundle.source), copy, copy_function=os.link)
    return copy


def _runs(site) -> set[str]:
    d = site.site_dir / "runs"
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


def test_install_refuses_a_bundle_with_a_truncated_blob_naming_the_artifact(site, bad_bundle, cli):
    """The gate checks signature, manifest and every blob's size before anything runs (the blobs'
    bytes are hashed as the master copies them: tests/integration/test_stick_read_once.py)."""
    manifest = json.loads((bad_bundle / "manifest.json").read_text())
    art = next(a for a in manifest["artifacts"] if a["kind"] == "apt-repo")
    blob = bad_bundle / "blobs/sha256" / art["files"][0]["digest"].removeprefix("sha256:")
    data = blob.read_bytes()
    blob.unlink()  # a hard link to the real bundle: replace, never write through it
    blob.write_bytes(data[:-1])
    before = _runs(site)
    r = cli("install", "--site", str(site.site_dir), "--bundle", str(bad_bundle))
    assert r.rc == 4, r.err
    assert f"apt-repo/{art['name']}" in r.err and "truncated" in r.err
    assert "Traceback" not in r.err
    assert _runs(site) == before  # no playbook was started


def test_install_refuses_an_unsigned_bundle(site, bad_bundle, cli):
    (bad_bundle / "manifest.sig").unlink()
    r = cli("install", "--site", str(site.site_dir), "--bundle", str(bad_bundle))
    assert r.rc == 4, r.err
    # its one error line names the signature (a preflight warning, such as the nodes' clock skew on
    # a loaded machine, may come before it)
    [error] = [ln for ln in r.err.splitlines() if ln.startswith("error:")]
    assert "manifest.sig missing: the bundle is unsigned" in error, r.err


# -- apt's own check of the bundle's repository (issue 28) -------------------------------------------
def _sign_with_a_key_of_our_own(release: str) -> str:
    """`release` clear-signed with a throwaway ed25519 key made here (gpg-agent's socket needs a
    short home directory)."""
    import subprocess
    import tempfile

    home = tempfile.mkdtemp(prefix="g", dir="/tmp")
    try:
        gpg = [
            "gpg",
            "--homedir",
            home,
            "--batch",
            "--quiet",
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
        ]
        subprocess.run([*gpg, "--quick-gen-key", "e2e stranger <stranger@e2e.invalid>", "ed25519", "sign", "never"],
                       check=True, capture_output=True)  # fmt: skip
        signed = subprocess.run([*gpg, "--clearsign", "--digest-algo", "SHA512"], input=release, check=True,
                                capture_output=True, text=True)  # fmt: skip
        return signed.stdout
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def test_apt_on_a_node_refuses_the_repository_re_signed_with_another_key_then_the_install_converges(
    site, hosts, cli
):
    """The master's served InRelease replaced by one signed with a key of our own making: apt on a
    worker refuses the repository (signed-by= names the bundle's key alone), and the next install
    serves the bundle's own again (bundle_view relinks what is no longer the blob)."""
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("re-signs the master's served apt repository: lab only")
    import base64
    import re
    from urllib.parse import urlsplit

    w, m = hosts[_worker(site)], hosts[site.master.name]
    line = w.check_output("grep -h '^deb ' /etc/apt/sources.list.d/appliance-offline.list")
    assert "[signed-by=/etc/apt/keyrings/appliance-offline.asc]" in line, line
    match = re.search(r"(http://\S+)\s+\./$", line)
    assert match, line
    served = "/srv/appliance/www" + urlsplit(match.group(1)).path.rstrip("/")  # bundle_repo_www
    original = m.check_output(f"sha256sum {shlex.quote(served)}/InRelease").split()[0]
    forged = _sign_with_a_key_of_our_own(m.check_output(f"cat {shlex.quote(served)}/Release") + "\n")
    blob = base64.b64encode(forged.encode()).decode()
    # a new file renamed over the served name: the blob it was linked to stays as it is
    m.check_output(f"echo {blob} | base64 -d > {shlex.quote(served)}/.InRelease.e2e "
                   f"&& mv {shlex.quote(served)}/.InRelease.e2e {shlex.quote(served)}/InRelease")  # fmt: skip
    # with index files from before, apt keeps using those and only warns: none, so it must refuse
    w.check_output("rm -rf /var/lib/apt/lists/*_InRelease /var/lib/apt/lists/*_Packages*")
    refused = w.run("apt-get update -q")
    said = "\n".join(
        ln for ln in (refused.stdout + refused.stderr).splitlines() if "InRelease" in ln or "NO_PUBKEY" in ln
    )
    print(said)  # apt's own lines, shown by pytest -rP
    assert refused.rc != 0, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "NO_PUBKEY" in said and "is not signed" in said, said
    again = cli("install", "--site", str(site.site_dir), "--skip-diagnose", timeout=1800)
    assert again.rc == 0, again.err[-3000:]
    assert m.check_output(f"sha256sum {shlex.quote(served)}/InRelease").split()[0] == original
    ok = w.run("apt-get update -q")
    assert ok.rc == 0, ok.stderr[-2000:]
