"""Faults injected into the installed lab (issue 19). Each stops the run with exactly one line
`error: ...` naming the node or artifact, a hint, a non-zero exit code; `appliance install`
run again converges (rc 0) and nothing the cluster held is lost. Each case leaves the lab
converged for the next one; the module starts from the installed lab's snapshot.

The last test greps every secret the site holds (bootstrap tokens, the registry's pull password,
private keys) over everything the runs wrote: the runs' artifacts, the CLI's output of the
session's installs and of the faults here, every node's journal and process list."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests._support.cli_proc import start_full_install

pytestmark = pytest.mark.usefixtures("installs")

KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
TOKEN = re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b")
MIN_SECRET = 16
# The CLI output of every run of this module, for the secrets grep at the end.
OUTPUTS: list[str] = []


def _record(run):
    OUTPUTS.extend((run.out, run.err))
    return run


def _error_line(run) -> str:
    """The run's one `error:` line (exactly one), with its hint right after it."""
    errors = [ln for ln in run.err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, run.err[-3000:]
    lines = run.err.splitlines()
    after = lines[lines.index(errors[0]) + 1 :]
    assert after and after[0].startswith("hint: "), run.err[-3000:]
    assert "Traceback" not in run.err, run.err[-3000:]
    print(f"{errors[0]}\n{after[0]}")  # shown by pytest -rP
    return errors[0]


def _lab_only() -> None:
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("injects faults: the lab only")


def _cluster(site, hosts) -> dict[str, set[str]]:
    """What must survive a fault: the Ready nodes and the pods' owners (daemonsets, replica sets,
    static pods' nodes) by namespace: a pod recreated under another name is not lost."""
    m = hosts[site.master.name]
    nodes = json.loads(m.check_output(f"{KUBECTL} get nodes -o json"))["items"]
    ready = {
        n["metadata"]["name"]
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
    }
    pods = json.loads(m.check_output(f"{KUBECTL} get pods -A -o json"))["items"]
    # pods of daemonsets and deployments are renamed when recreated: their owner is what lasts
    owners = {
        f"{p['metadata']['namespace']}/{(p['metadata'].get('ownerReferences') or [{}])[0].get('name', p['metadata']['name'])}"
        for p in pods
    }
    return {"ready": ready, "owners": owners}


def _converges(site, cli, before: dict[str, set[str]], hosts) -> None:
    """`appliance install` again: rc 0, nothing failed, every node Ready, nothing lost. Without the
    quick diagnose that ends an install (35-45 s on 4 nodes): the session install runs it, and
    test_diagnose_lab.py is about it."""
    again = _record(cli("install", "--site", str(site.site_dir), "--skip-diagnose", timeout=1800))
    assert again.rc == 0, again.out[-3000:] + again.err[-3000:]
    assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in again.recap.values()), again.recap
    after = _wait_ready(site, hosts, before)
    assert after["ready"] == {n.name for n in site.nodes}, after["ready"]
    assert before["owners"] <= after["owners"], f"lost: {sorted(before['owners'] - after['owners'])}"


def _wait_ready(site, hosts, before, timeout: float = 300) -> dict[str, set[str]]:
    end = time.monotonic() + timeout
    while True:
        now = _cluster(site, hosts)
        if (now["ready"] >= before["ready"] and before["owners"] <= now["owners"]) or time.monotonic() > end:
            return now
        time.sleep(5)


class _TaskWatch:
    """Whether the run started after this watch was made has begun a task (its job events, each
    file read once)."""

    def __init__(self, site, name: str):
        self.runs = site.site_dir / "runs"
        self.before = {p.name for p in self.runs.iterdir()}
        self.name = f'"task": {json.dumps(name)}'
        self.seen: set[Path] = set()

    def started(self) -> bool:
        for run_dir in self.runs.iterdir():
            if run_dir.name in self.before:
                continue
            for ev in set(run_dir.glob("artifacts/*/job_events/*.json")) - self.seen:
                text = _read(ev)
                if text.endswith("}"):  # complete: read no more
                    self.seen.add(ev)
                if self.name in text:  # the task's start, or any of its events after it
                    return True
        return False


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _with_role_vars(site, extra: dict[str, str]) -> str:
    """Add role_vars to the site config; returns the original text (to restore)."""
    path = _site_file(site)
    original = path.read_text()
    doc = yaml.safe_load(original)
    doc.setdefault("role_vars", {}).update(extra)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return original


def _site_file(site) -> Path:
    return Path(site.source) if site.source else site.site_dir / "appliance.yml"


def test_a_join_with_an_expired_token_is_named_then_a_rerun_joins(site, hosts, cli):
    """node_join creates the worker's token; a TTL of 1s (role_vars, as a site could set it) has it
    expired by the time kubeadm join reads the 0600 JoinConfiguration. The stand-in kubeadm fails as
    kubeadm 1.23 does: the cluster-info ConfigMap carries no JWS for an expired token, so discovery
    gives up after its timeout (shortened here from kubeadm's 5 minutes)."""
    _lab_only()
    worker = next(n for n in reversed(site.nodes) if "master" not in n.roles)
    before = _cluster(site, hosts)
    original = _with_role_vars(site, {"node_join_token_ttl": "1s", "node_join_discovery_timeout": "30s"})
    try:
        r = _record(cli("node", "rejoin", "--site", str(site.site_dir), worker.name, "--yes", timeout=1800))
    finally:
        _site_file(site).write_text(original)
    assert r.rc == 5, r.out[-3000:] + r.err[-3000:]
    line = _error_line(r)
    assert f"kubeadm join failed on {worker.name}" in line, line
    # Where kubeadm meets the expired token depends on timing, as on a site: discovery, when the
    # cluster-info signature is already gone; preflight's read of kubeadm-config, when it expired just
    # after discovery (the API server refuses the token); else the kubelet's TLS bootstrap, which then
    # times out and leaves a half-done join behind (the re-run below must undo it).
    at_discovery = (
        "couldn't validate the identity of the API Server" in line
        and "JWS signature in the cluster-info ConfigMap for token ID" in line
        and "expired or was deleted before the join" in line
    )
    at_preflight = (
        "error execution phase preflight: unable to fetch the kubeadm-config ConfigMap" in line
        and "Unauthorized" in line
        and "expired or was deleted before the join" in line
    )
    at_bootstrap = (
        "error execution phase kubelet-start: timed out waiting for the condition" in line
        and "the kubelet did not finish its TLS bootstrap: the join token (ttl 1s) may have expired" in line
    )
    assert at_discovery or at_preflight or at_bootstrap, line
    assert not TOKEN.search(r.out + r.err), "a bootstrap token in the CLI's output"
    # the JoinConfiguration holding the token is gone from the worker
    assert not hosts[worker.name].file("/etc/kubernetes/appliance-join.yaml").exists
    _converges(site, cli, before, hosts)


def test_the_registry_stopped_while_seeding_is_named_then_a_rerun_converges(site, hosts, cli):
    """docker-registry stopped on the master once the seeding task began: the pull check after it
    fails naming the registry and the master; the next install starts it again."""
    _lab_only()
    master = hosts[site.master.name]
    before = _cluster(site, hosts)
    seeding = _TaskWatch(site, "Seed | Lay the bundle's images into the registry storage")
    run = start_full_install(site.site_dir)
    try:
        end = time.monotonic() + 900
        while not seeding.started():
            assert time.monotonic() < end and run.poll() is None, "the install never reached the seeding"
            time.sleep(0.3)
        master.check_output("systemctl stop docker-registry")
        out, err = run.communicate(timeout=1800)
    finally:
        if run.poll() is None:
            run.kill()
    OUTPUTS.extend((out, err))
    assert run.returncode == 5, out[-3000:] + err[-3000:]
    line = _error_line(SimpleNamespace(out=out, err=err))
    assert site.master.name in line and site.registry.address in line, line
    assert not master.service("docker-registry").is_running
    _converges(site, cli, before, hosts)
    assert master.service("docker-registry").is_running


def test_an_image_gone_from_the_registry_is_named_by_the_image_check_and_the_kubelet(site, hosts, cli):
    """The GPU Operator's device plugin image is gone from the private registry (its tag, as a
    registry clean-up would leave it) and from every node's containerd. A run of that role alone
    (`--tags gpu_operator`: the registry is not seeded) stops at the image check before helm, in one
    line naming the pull node, the release, the registry and the image. A pod of that image shows
    the kubelet's events: `Failed to pull image "REF": ...` and `Error: ErrImagePull`. The whole
    install seeds the registry again from the bundle and converges."""
    _lab_only()
    master = hosts[site.master.name]
    held = {n.name: hosts[n.name].check_output("ctr -n k8s.io images ls -q").split() for n in site.nodes}
    ref = next(r for refs in held.values() for r in refs if "/nvidia/k8s-device-plugin:" in r)
    repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
    link = f"/var/lib/docker-registry/docker/registry/v2/repositories/{repo}/_manifests/tags/{tag}"
    before = _cluster(site, hosts)
    master.check_output(shlex.join(["test", "-f", f"{link}/current/link"]))
    master.check_output(shlex.join(["rm", "-rf", link]))
    for name, refs in held.items():
        if ref in refs:
            hosts[name].check_output(shlex.join(["ctr", "-n", "k8s.io", "images", "rm", ref]))
    args = ("install", "--site", str(site.site_dir), "--skip-diagnose", "--skip-preflight")
    r = _record(cli(*args, "--tags", "gpu_operator", timeout=1800))
    assert r.rc == 5, r.out[-3000:] + r.err[-3000:]
    line = _error_line(r)
    assert (
        f"could not pull 1 image(s) of the GPU Operator release from {site.registry.address}: {ref} " in line
    ), line
    # crictl's cause, its logrus prefix gone: the tag the registry lost is `not found`
    assert f"{ref} pulling image: rpc error: code = NotFound desc = " in line, line
    assert f"{ref}: not found — the private registry lacks them" in line, line

    node = next(n.name for n in site.nodes if "master" not in n.roles)
    overrides = json.dumps({"apiVersion": "v1", "spec": {"nodeName": node}})
    probe = ["run", "image-gone-probe", "--image", ref, "--restart", "Never", "--overrides", overrides]
    master.check_output(shlex.join([*KUBECTL.split(), "-n", "default", *probe]))
    try:
        want = (f'Failed to pull image "{ref}": ', "Error: ErrImagePull")
        end, messages = time.monotonic() + 90, []
        while time.monotonic() < end:
            events = json.loads(master.check_output(shlex.join([*KUBECTL.split(), "-n", "default", "get", "events",
                                "--field-selector", "involvedObject.name=image-gone-probe", "-o", "json"])))  # fmt: skip
            messages = [(e["source"].get("host"), e["message"]) for e in events["items"]]
            if all(any(m.startswith(w) for _, m in messages) for w in want):
                break
            time.sleep(2)
        print("\n".join(f"{h}: {m}" for h, m in messages))  # shown by pytest -rP
        assert all(any(h == node and m.startswith(w) for h, m in messages) for w in want), messages
    finally:
        master.check_output(shlex.join([*KUBECTL.split(), "-n", "default", "delete", "pod", "image-gone-probe",
                                        "--grace-period=0", "--force", "--ignore-not-found"]))  # fmt: skip
    _converges(site, cli, before, hosts)
    master.check_output(shlex.join(["test", "-f", f"{link}/current/link"]))


def test_a_bundle_blob_written_to_on_the_master_is_caught_by_sync_then_a_recopy_converges(site, hosts, cli):
    """A blob of the master's bundle copy is written to after Sync verified it (one byte, same
    size, its mtime moves): the next install's Sync no longer finds the blob's recorded stamp, hashes
    it and stops before anything is installed: exit 4, one line naming the file, the blob and its
    artifact. Once the file is removed, Sync copies it again from the stick and the install converges."""
    _lab_only()
    master = hosts[site.master.name]
    manifest = json.loads(master.check_output(f"cat {site.bundle.path}/manifest.json"))
    art = next(a for a in manifest["artifacts"] if a["kind"] == "helm-chart")
    digest = art["files"][0]["digest"].split(":")[1]
    blob = f"{site.bundle.path}/blobs/sha256/{digest}"
    before = _cluster(site, hosts)
    _flip_middle_byte(master, blob, keep_mtime=False)
    r = _record(cli("install", "--site", str(site.site_dir), "--skip-diagnose", timeout=1800))
    assert r.rc == 4, r.out[-3000:] + r.err[-3000:]
    line = _error_line(r)
    assert line.startswith(f"error: {site.master.name}: ") and f"{blob}: blob sha256:{digest} (" in line, line
    assert f"helm-chart/{art['name']}" in line and "the manifest's size but other bytes" in line, line
    master.check_output(f"rm -f {blob}")
    _converges(site, cli, before, hosts)
    assert master.check_output(f"sha256sum {blob}").split()[0] == digest


def test_a_bundle_blob_corrupted_on_the_master_is_caught_then_a_recopy_converges(site, hosts, cli):
    """A chart's blob in the master's bundle copy rots after Sync verified it (same size, same mtime:
    Sync's record of the blob still matches, so it is not hashed again). The chart is fetched again
    (its downloaded copy removed), get_url's sha256 check refuses it, naming the chart; once the blob
    is removed, Sync copies it again from the stick and the next install converges."""
    _lab_only()
    master = hosts[site.master.name]
    manifest = json.loads(master.check_output(f"cat {site.bundle.path}/manifest.json"))
    charts = {a["name"]: a for a in manifest["artifacts"] if a["kind"] == "helm-chart"}
    on_master = set(master.check_output("ls /var/lib/appliance/charts").split())
    chart = next(a for a in charts.values() if Path(a["files"][0]["path"]).name in on_master)
    digest = chart["files"][0]["digest"].split(":")[1]
    blob = f"{site.bundle.path}/blobs/sha256/{digest}"
    downloaded = f"/var/lib/appliance/charts/{Path(chart['files'][0]['path']).name}"
    before = _cluster(site, hosts)
    _flip_middle_byte(master, blob, keep_mtime=True)  # rot: size and mtime unchanged
    assert master.check_output(f"sha256sum {blob}").split()[0] != digest
    master.check_output(f"rm -f {downloaded}")
    r = _record(cli("install", "--site", str(site.site_dir), "--skip-diagnose", timeout=1800))
    assert r.rc == 4, r.out[-3000:] + r.err[-3000:]  # the bundle is corrupt
    line = _error_line(r)
    assert line.startswith(f"error: {site.master.name}: ") and chart["name"] in line, line
    assert f"not the manifest's sha256:{digest} (corrupt on {site.master.name})" in line, line
    assert f"remove {blob} there" in r.err, r.err[-2000:]
    assert not master.file(downloaded).exists  # the corrupt chart was not kept
    master.check_output(f"rm -f {blob}")
    _converges(site, cli, before, hosts)
    assert master.check_output(f"sha256sum {blob}").split()[0] == digest
    assert master.check_output(f"sha256sum {downloaded}").split()[0] == digest


def _flip_middle_byte(host, path: str, keep_mtime: bool) -> None:
    """Flip the middle byte of `path` on `host` in place (every hard link sees it), its size kept;
    with keep_mtime its mtime too, as bit rot would leave it."""
    restore = "; os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))" if keep_mtime else ""
    host.check_output(
        "python3 -c \"import os, sys; p=sys.argv[1]; st=os.stat(p); f=open(p,'r+b'); f.seek(st.st_size // 2);"
        f' b=f.read(1); f.seek(st.st_size // 2); f.write(bytes([b[0] ^ 0xFF])); f.close(){restore}" {path}'
    )


def _pem_body_lines(text: str) -> list[str]:
    """The base64 lines of the PEM private keys in `text` (not their BEGIN/END lines, nor certificates)."""
    lines, inside = [], False
    for ln in (raw.strip() for raw in text.splitlines()):
        if ln.startswith("-----BEGIN") and "PRIVATE KEY" in ln:
            inside = True
        elif ln.startswith("-----END"):
            inside = False
        elif inside and len(ln) >= MIN_SECRET and ":" not in ln:
            lines.append(ln)
    return lines


def _site_secrets(site, hosts) -> dict[str, list[str]]:
    """Every secret the site holds, by where it was found: each a string >= 16 characters."""
    m = hosts[site.master.name]
    found: dict[str, list[str]] = {}
    secrets = json.loads(m.check_output(f"{KUBECTL} -n kube-system get secrets -o json"))["items"]
    tokens = []
    for s in secrets:
        if s.get("type") == "bootstrap.kubernetes.io/token":
            d = {k: base64.b64decode(v).decode() for k, v in s.get("data", {}).items()}
            tokens.append(d["token-secret"])
    found["bootstrap token secrets (kube-system)"] = tokens
    found["registry pull password"] = [
        m.check_output("cat /etc/appliance/registry-auth/appliance.password").strip()
    ]
    keys = m.check_output(
        "ls /etc/kubernetes/pki/*.key /etc/kubernetes/pki/etcd/*.key /etc/appliance/pki/*.key"
    )
    for path in keys.split():
        found[f"{site.master.name}:{path}"] = _pem_body_lines(m.check_output(f"cat {path}"))
    admin = yaml.safe_load(m.check_output("cat /etc/kubernetes/admin.conf"))
    key_data = admin["users"][0]["user"]["client-key-data"]
    # base64 of the PEM: 64-character pieces, the first (the BEGIN line's) left out
    found["admin.conf client-key-data"] = [key_data[i : i + 64] for i in range(64, len(key_data) - 63, 64)]
    for worker in (n.name for n in site.nodes if "master" not in n.roles):  # their TLS-bootstrapped keys
        pem = hosts[worker].check_output("cat /var/lib/kubelet/pki/kubelet-client-current.pem")
        found[f"{worker}:/var/lib/kubelet/pki/kubelet-client-current.pem"] = _pem_body_lines(pem)
    if site.ssh.private_key:
        found["site ssh key"] = _pem_body_lines(site.resolve(site.ssh.private_key).read_text())
    if site.site.tls:
        found["site TLS key"] = _pem_body_lines(site.resolve(site.site.tls.key).read_text())
    if site.researcher_registry:
        for u in site.researcher_registry.users:
            found[f"researcher registry password of {u.name}"] = [
                site.resolve(u.password_file).read_text().strip()
            ]
    return found


def test_no_secret_in_any_log_output_journal_or_process_list(site, hosts, installs, dry_run_before_install):
    """Every secret, each checked to be there and long enough to mean something, is absent from all
    that the runs wrote or showed."""
    secrets = _site_secrets(site, hosts)
    for where, values in secrets.items():
        assert values, f"no secret found in {where}: the grep would prove nothing"
        assert all(len(v) >= MIN_SECRET for v in values), where
    assert len(secrets["bootstrap token secrets (kube-system)"]) >= 1
    assert any(k.endswith("/etc/kubernetes/pki/ca.key") for k in secrets)
    assert any(k.endswith("/etc/appliance/pki/registry.key") for k in secrets)

    haystacks: dict[str, str] = {}
    run_files = [p for p in (site.site_dir / "runs").rglob("*") if p.is_file()]
    assert any(p.parent.name == "job_events" for p in run_files) and any(
        p.name == "stdout" for p in run_files
    )
    for p in run_files:
        haystacks[str(p)] = _read(p)
    for i, run in enumerate(installs):
        haystacks[f"install #{i + 1} stdout"], haystacks[f"install #{i + 1} stderr"] = run.out, run.err
    dry = dry_run_before_install.run
    haystacks["dry run (--check --diff) stdout"], haystacks["dry run stderr"] = dry.out, dry.err
    haystacks["this module's CLI output"] = "\n".join(OUTPUTS)
    for name, h in hosts.items():
        journal = h.run("journalctl --no-pager -o cat")
        assert journal.rc == 0 and len(journal.stdout) > 10_000, f"{name}: no journal to grep"
        haystacks[f"{name} journal"] = journal.stdout
        haystacks[f"{name} processes"] = h.check_output("ps -eo args")
    haystacks["controller processes"] = subprocess.run(
        ["ps", "-eo", "args"], capture_output=True, text=True, check=True
    ).stdout
    assert all(isinstance(v, str) for v in haystacks.values())

    leaks = [
        f"{where} in {hay}"
        for where, values in secrets.items()
        for v in values
        for hay, text in haystacks.items()
        if v in text
    ]
    assert not leaks, "secrets leaked:\n" + "\n".join(sorted(set(leaks)))
