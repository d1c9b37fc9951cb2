"""The runai scheduler stack on a lab of its own (2 nodes: master1 runai-system, worker1 with 4
GPUs by its class), installed from a copy of the lab bundle into which the SYNTHETIC vendor tar
(tests/_support/runai_vendor.py) was imported with `appliance bundle import-runai` and signed
again. Run:ai's API is the test server tests/_support/runai_api.py, started on master1 as a
transient systemd unit on the scheduler's external IP (added to master1's interface) with the
site's certificate, the domain resolved through master1's /etc/hosts: nothing of it is on the
production path. The lab site is switched to `scheduler.stack: runai` with a CA and certificate
made here for runai.lab.internal.

First the refusals, before anything changes (exit 2 naming site.tls for a missing certificate,
one for another name, from another CA, expiring in 10 days; exit 4 naming runai-backend for a
bundle without the vendor's tar); then the install: the prerequisites, backend and cluster charts
through the helm stand-in, every image pulled on a node from the lab registry, the admin password
changed from the default and stored 0600, departments and projects with their quotas in the API
server, nothing secret in the run's artifacts, and a re-run that changes nothing; a project
that leaves the site config is refused while a job of it runs, and deleted with --force.
Lab only (it adds an address to master1 and starts a server there)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.core.siteconfig import SiteConfig, load_site
from tests._support.bundles import BUSYBOX
from tests._support.lab_nodes import run_as_root
from tests._support.runai_vendor import make_vendor_tar
from tests._support.tlscerts import make_ca, make_leaf, write_tls
from tests.e2e.conftest import SignedBundle

LAB = os.environ.get("APPLIANCE_E2E_RUNAI_LAB", "rai")
VERSION = "2.9.0"
DOMAIN = "runai.lab.internal"
EXTERNAL_IP = "10.77.0.250"  # free on the lab's 10.77.0.0/24 (nodes .11-.14, host .1)
ADMIN = f"admin@{DOMAIN}"
API_DIR = "/run/runai-api-test"  # on master1, tmpfs: the test server, its certificate and state
API_UNIT = "runai-api-test"
REPO = Path(__file__).resolve().parents[2]
KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
HELM = "helm --kubeconfig /etc/kubernetes/admin.conf"
DEPARTMENTS = [{"name": "research", "gpus": 3}, {"name": "default"}]
PROJECTS = [
    {"name": "team-a", "gpus": 2, "department": "research"},
    {"name": "team-b", "gpus": 1, "department": "research", "over_quota": False},
    {"name": "team-c", "gpus": 1},
]


def _ssh_write(node: str, path: str, data: bytes, mode: str = "0600") -> None:
    """Write `data` to `path` on `node` through ssh's stdin (never on a command line)."""
    from appliance_cli import lab

    cmd = f"umask 077; mkdir -p {shlex.quote(os.path.dirname(path))}; cat > {shlex.quote(path)}; chmod {mode} {shlex.quote(path)}"
    r = subprocess.run(lab.ssh_argv(node, ["sudo", "sh", "-c", shlex.quote(cmd)]), input=data,
                       capture_output=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr[-500:]


@pytest.fixture(scope="module")
def runai_bundle(lab_bundle: SignedBundle, cli, tmp_path_factory) -> Iterator[SignedBundle]:
    """A copy of the lab bundle (blobs hard-linked, they are never modified) with the synthetic
    vendor tar imported by `appliance bundle import-runai` and signed again with a key of its own."""
    root = lab_bundle.path.parent / "bundle-runai"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    for p in lab_bundle.path.iterdir():
        if p.name == "blobs":
            subprocess.run(["cp", "-al", str(p), str(root / "blobs")], check=True)
        elif p.is_file():
            shutil.copy2(p, root / p.name)
        else:
            shutil.copytree(p, root / p.name)
    tmp = tmp_path_factory.mktemp("runai-vendor")
    tar = make_vendor_tar(tmp, VERSION, BUSYBOX)
    run = cli("bundle", "import-runai", str(tar), "--into", str(root))
    assert run.rc == 0, run.err[-2000:]
    keys = tmp_path_factory.mktemp("runai-key")
    run = cli("bundle", "keygen", "--out", str(keys / "runai"))
    assert run.rc == 0, run.err[-2000:]
    run = cli("bundle", "sign", str(root), "--key", str(keys / "runai.key"))
    assert run.rc == 0, run.err[-2000:]
    yield SignedBundle(root, keys / "runai.pub")
    shutil.rmtree(root, ignore_errors=True)  # after the lab that mounted it is gone


@pytest.fixture(scope="module")
def org_ca():
    return make_ca("Rehearsal Lab Root CA")


def _switch_site(site_dir: Path, tls: dict[str, str] | None) -> None:
    path = site_dir / "appliance.yml"
    data = yaml.safe_load(path.read_text())
    data["scheduler"] = {"stack": "runai", "version": VERSION, "external_ip": EXTERNAL_IP, "admin_email": ADMIN,
                         "departments": DEPARTMENTS, "projects": PROJECTS}  # fmt: skip
    data["site"]["domain"] = DOMAIN
    if tls:
        data["site"]["tls"] = tls
    else:
        data["site"].pop("tls", None)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture(scope="module")
def lab(own_lab_cm, runai_bundle) -> Iterator[Path]:
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("starts a Run:ai API test server on master1: lab only")
    with own_lab_cm(LAB, 2, runai_bundle) as layout:
        yield layout.site_dir


def _refused(run, code: int) -> str:
    assert run.rc == code, (run.rc, run.out[-1500:], run.err[-1500:])
    assert "Traceback" not in run.out + run.err
    errors = [ln for ln in run.err.splitlines() if ln.startswith("error")]
    assert len(errors) == 1, run.err
    assert "hint:" in run.err
    return errors[0]


def test_refusals_before_anything_changes(lab: Path, org_ca, lab_bundle: SignedBundle, cli, capsys) -> None:
    """Each one line naming the field or the artifact, a hint, no traceback; no node touched."""
    site = str(lab)
    lines = {}
    _switch_site(lab, None)
    lines["no tls"] = _refused(cli("install", "--site", site), 2)
    for case, names, days, ca in (("another name", ["runai.other.internal"], 365, org_ca),
                                  ("another CA", [DOMAIN], 365, make_ca("Some Other CA")),
                                  ("10 days", [DOMAIN], 10, org_ca)):  # fmt: skip
        cert, key = make_leaf(ca, names, days=days, ips=[EXTERNAL_IP])
        _switch_site(lab, write_tls(lab, org_ca, cert, key))
        lines[case] = _refused(cli("install", "--site", site), 2)
    cert, key = make_leaf(org_ca, [DOMAIN], days=365, ips=[EXTERNAL_IP])
    _switch_site(lab, write_tls(lab, org_ca, cert, key))
    lines["no vendor tar"] = _refused(cli("install", "--site", site, "--skip-preflight", "--bundle", str(lab_bundle.path),
                                          "--key", str(lab_bundle.public_key)), 4)  # fmt: skip
    with capsys.disabled():
        for case, line in lines.items():
            print(f"\n  refused ({case}): {line}")
    assert "site.tls: required when scheduler.stack is 'runai'" in lines["no tls"]
    assert (
        "site.tls.certificate: tls/runai.crt: issued for runai.other.internal, not runai.lab.internal"
        in lines["another name"]
    )
    assert "site.tls.certificate: tls/runai.crt: not signed by tls/org-ca.crt" in lines["another CA"]
    assert "site.tls.certificate: tls/runai.crt: expires on " in lines["10 days"]
    assert (
        "no helm-chart/runai-backend artifact" in lines["no vendor tar"] and VERSION in lines["no vendor tar"]
    )
    # nothing was installed: the master has no copy of the bundle yet
    assert (
        run_as_root("master1", "test -e /srv/appliance/bundle/manifest.json && echo yes || echo no").strip()
        == "no"
    )


@pytest.fixture(scope="module")
def api_server(lab: Path) -> Iterator[None]:
    """The Run:ai API test server on master1 at EXTERNAL_IP:443 with the site's certificate."""
    tls = lab / "tls"
    dev = run_as_root(
        "master1", "ip -o -4 route get 10.77.0.1 | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p'"
    ).strip()
    run_as_root("master1", f"ip addr replace {EXTERNAL_IP}/32 dev {dev}")
    run_as_root("master1", f"grep -q ' {DOMAIN}$' /etc/hosts || echo '{EXTERNAL_IP} {DOMAIN}' >> /etc/hosts")
    _ssh_write(
        "master1", f"{API_DIR}/runai_api.py", (REPO / "tests/_support/runai_api.py").read_bytes(), "0644"
    )
    _ssh_write("master1", f"{API_DIR}/tls.crt", (tls / "runai.crt").read_bytes())
    _ssh_write("master1", f"{API_DIR}/tls.key", (tls / "runai.key").read_bytes())
    run_as_root("master1", f"systemctl stop {API_UNIT} 2>/dev/null; systemctl reset-failed {API_UNIT} 2>/dev/null; "
                f"systemd-run --unit {API_UNIT} --collect python3 {API_DIR}/runai_api.py --address {EXTERNAL_IP} "
                f"--port 443 --cert {API_DIR}/tls.crt --key {API_DIR}/tls.key --state {API_DIR}/state.json "
                f"--admin {ADMIN} --domain {DOMAIN}")  # fmt: skip
    run_as_root("master1", f"for i in $(seq 50); do python3 -c \"import socket; socket.create_connection(('{EXTERNAL_IP}', 443), 1)\" "
                "2>/dev/null && exit 0; sleep 0.2; done; exit 1")  # fmt: skip
    yield
    run_as_root("master1", f"systemctl stop {API_UNIT} || true")


@pytest.fixture(scope="module")
def installs(lab: Path, api_server, cli) -> list[Any]:
    """The install (preflight first), then `--tags scheduler_stack` again, then the same in check
    mode. The re-runs skip the preflight: once libnfs-utils is on the master it measures the lab
    filer's free space, under Run:ai's 110 GB on this machine, and rightly refuses a runai site."""
    first = cli("install", "--site", str(lab), "--skip-diagnose", timeout=3000)
    runs = [first]
    if first.rc == 0:
        again = ("install", "--site", str(lab), "--tags", "scheduler_stack", "--skip-preflight")
        runs.append(cli(*again, timeout=1800))
        runs.append(cli(*again, "--check", "--diff", timeout=1800))
    return runs


@pytest.fixture(scope="module")
def site(lab: Path, installs) -> SiteConfig:
    return load_site(lab)


def _finished(run) -> str:
    return next((ln for ln in run.out.splitlines() if ln.startswith("install finished")), "?")


def test_the_install_succeeds_and_names_the_password_file(installs, capsys) -> None:
    first = installs[0]
    assert first.rc == 0, (first.out[-4000:], first.err[-4000:])
    with capsys.disabled():
        print(f"\n  first install: {_finished(first)}; recap {first.recap}")
    assert "password in /etc/appliance/runai/admin-password on master1 (root, 0600" in first.out + first.err


def _helm_release(ns: str, name: str) -> dict[str, Any]:
    [rel] = [
        r for r in json.loads(run_as_root("master1", f"{HELM} -n {ns} list -o json")) if r["name"] == name
    ]
    return rel


def test_prerequisites_backend_and_cluster_charts_are_deployed(site, installs) -> None:
    want = {("ingress-nginx", "ingress-nginx"): "ingress-nginx-4.5.2",
            ("monitoring", "kube-prometheus-stack"): "kube-prometheus-stack-45.7.1",
            ("runai-backend", "runai-backend"): f"runai-backend-{VERSION}",
            ("runai", "runai-cluster"): f"runai-cluster-{VERSION}"}  # fmt: skip
    for (ns, name), chart in want.items():
        rel = _helm_release(ns, name)
        assert (rel["chart"], rel["status"], rel["revision"]) == (chart, "deployed", "1"), rel
    crd = run_as_root("master1", f"{KUBECTL} get crd servicemonitors.monitoring.coreos.com -o name").strip()
    assert crd.endswith("servicemonitors.monitoring.coreos.com")


def test_the_backend_values_come_from_the_site(site, installs) -> None:
    v = json.loads(run_as_root("master1", f"{HELM} -n runai-backend get values runai-backend -o json"))
    reg = site.registry.address
    g = v["global"]
    assert (g["domain"], g["airgapped"], g["ingress"]["tlsSecretName"]) == (DOMAIN, True, "runai-backend-tls")
    assert g["nodeSelector"] == {"node-role.kubernetes.io/runai-system": "true"}
    assert g["tolerations"] == [  # and the control-plane taint kubeadm 1.24 adds on upgrade
        {"effect": "NoSchedule", "key": "node-role.kubernetes.io/master", "operator": "Exists"},
        {"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
    ]
    assert v["nginx-ingress"]["controller"]["service"]["externalIPs"] == [EXTERNAL_IP]
    assert v["nfs-client-provisioner"]["nfs"] == {"server": site.nfs.server, "path": site.nfs.path}
    assert v["backend"]["image"] == {"repository": f"{reg}/run-ai-prod/backend", "tag": VERSION}
    secret = json.loads(
        run_as_root("master1", f"{KUBECTL} -n runai-backend get secret runai-backend-tls -o json")
    )
    assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"tls.crt", "tls.key"}
    modes = run_as_root("master1", "stat -c '%a %U %n' /etc/appliance/runai /etc/appliance/runai/tls.key "
                        "/etc/appliance/runai/runai-backend.yml /etc/appliance/helm/runai-cluster.values.yaml").split("\n")  # fmt: skip
    assert [m.split()[0] for m in modes if m] == ["700", "600", "600", "600"], modes


def test_every_image_was_pulled_from_the_lab_registry(site, installs) -> None:
    reg = site.registry.address
    master = run_as_root("master1", "ctr -n k8s.io images ls -q").split()
    worker = run_as_root("worker1", "ctr -n k8s.io images ls -q").split()
    for name in ("backend", "frontend", "identity-manager", "postgres", "nginx-ingress-controller"):
        assert f"{reg}/run-ai-prod/{name}:{VERSION}" in master, name
    for name in ("operator", "scheduler", "agent"):
        assert f"{reg}/run-ai-prod/{name}:{VERSION}" in worker, name
    for ref in ("ingress-nginx/controller:v1.6.4", "prometheus/prometheus:v2.42.0",
                "prometheus-operator/prometheus-operator:v0.63.0", "kube-state-metrics/kube-state-metrics:v2.8.1"):  # fmt: skip
        assert f"{reg}/{ref}" in master, ref


def test_runai_adm_is_on_the_master(installs) -> None:
    out = run_as_root("master1", "/usr/local/bin/runai-adm version")
    assert f"runai-adm version {VERSION}" in out


def _api_state() -> dict[str, Any]:
    """The test server's state, with the password and secrets replaced by what the test needs."""
    script = (
        "import json; s = json.load(open('@API@/state.json')); p = open('/etc/appliance/runai/admin-password').read();"
        "print(json.dumps({'stored_is_current': s['password'] == p, 'default_left': s['password'] == 'password',"
        "'log': s['log'], 'clusters': [c['name'] for c in s['clusters']],"
        "'departments': {d['name']: d['resources'][0]['gpu'] for d in s['departments']},"
        "'projects': {p['name']: [p['parentId'], p['resources'][0]['gpu']] for p in s['projects']},"
        "'dep_ids': {d['id']: d['name'] for d in s['departments']}}))"
    ).replace("@API@", API_DIR)
    return json.loads(run_as_root("master1", f"python3 -c {shlex.quote(script)}"))


def test_the_default_admin_password_was_changed_and_stored_0600(installs) -> None:
    state = _api_state()
    assert state["stored_is_current"] is True and state["default_left"] is False
    assert state["log"] == ["password changed"]  # once: the re-run logged in with the stored one
    mode = run_as_root("master1", "stat -c '%a %U' /etc/appliance/runai/admin-password").split()
    assert mode == ["600", "root"]
    code = run_as_root("master1", f"curl -s -o /dev/null -w '%{{http_code}}' --cacert /etc/appliance/runai/ca.crt "
                       f"-d grant_type=password -d client_id=runai --data-urlencode username={ADMIN} "
                       f"-d password=password https://{DOMAIN}/auth/realms/runai/protocol/openid-connect/token")  # fmt: skip
    assert code == "401"  # the vendor's default no longer logs in


def test_departments_projects_and_quotas_are_in_runai(site, installs) -> None:
    state = _api_state()
    assert state["clusters"] == [site.site.name]
    assert state["departments"] == {"default": {"deserved": 1, "limit": -1, "overQuotaWeight": 2},
                                    "research": {"deserved": 3, "limit": -1, "overQuotaWeight": 2}}  # fmt: skip
    projects = {n: (state["dep_ids"][parent], gpu) for n, (parent, gpu) in state["projects"].items()}
    assert projects == {
        "team-a": ("research", {"deserved": 2, "limit": -1, "overQuotaWeight": 2}),
        "team-b": ("research", {"deserved": 1, "limit": 1, "overQuotaWeight": 0}),
        "team-c": ("default", {"deserved": 1, "limit": -1, "overQuotaWeight": 2}),
    }


def test_no_secret_reaches_the_runs_artifacts(lab: Path, installs) -> None:
    secrets = json.loads(run_as_root("master1", "python3 -c " + shlex.quote(
        "import json; s = json.load(open('@API@/state.json')); k = open('@API@/tls.key').read().splitlines()[1];"
        "print(json.dumps([s['password'], k] + [c['secret'] for c in s['clusters']] + s['tokens']))".replace("@API@", API_DIR))))  # fmt: skip
    assert len(secrets) >= 3
    leaked = []
    for path in (lab / "runs").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            leaked += [str(path) for s in secrets if s.encode() in data]
    assert not leaked, f"{len(leaked)} artifact files hold a secret: {sorted(set(leaked))[:5]}"


def test_a_rerun_changes_nothing(installs, capsys) -> None:
    assert len(installs) == 3
    rerun = installs[1]
    assert rerun.rc == 0, (rerun.out[-4000:], rerun.err[-4000:])
    with capsys.disabled():
        print(f"\n  re-run --tags scheduler_stack: {_finished(rerun)}; recap {rerun.recap}")
    assert {h: s["changed"] for h, s in rerun.recap.items()} == {"master1": 0, "worker1": 0}, rerun.out[
        -3000:
    ]


def test_node_roles_as_runai_reads_them(installs) -> None:
    """The labels Run:ai's values select and its scheduler reads (K1), and the master's taint the
    system workloads tolerate (K13)."""
    nodes = {
        n["metadata"]["name"]: n
        for n in json.loads(run_as_root("master1", f"{KUBECTL} get nodes -o json"))["items"]
    }
    assert nodes["master1"]["metadata"]["labels"].get("node-role.kubernetes.io/runai-system") == "true"
    taints = [(t["key"], t["effect"]) for t in nodes["master1"]["spec"].get("taints") or []]
    assert ("node-role.kubernetes.io/master", "NoSchedule") in taints
    assert nodes["worker1"]["metadata"]["labels"].get("node-role.kubernetes.io/runai-gpu-worker") == "true"


def test_check_mode_reports_no_drift_and_leaks_nothing(installs, capsys) -> None:
    """--check --diff after the install: nothing would change, and no diff shows the key, the
    password or the client secret (the API part stops in check mode: it would change state)."""
    check = installs[2]
    assert check.rc == 0, (check.out[-4000:], check.err[-4000:])
    with capsys.disabled():
        print(f"\n  --check --diff: {_finished(check)}; recap {check.recap}")
    assert {h: s["changed"] for h, s in check.recap.items()} == {"master1": 0, "worker1": 0}, check.out[
        -3000:
    ]
    assert "PRIVATE KEY" not in check.out + check.err


def test_backup_names_the_volumes_holding_runais_own_data(lab: Path, site, installs, cli, capsys) -> None:
    """`appliance backup` on a Run:ai site: Run:ai's database lives on a volume, not in etcd, so the
    backup records the backend's claims and says, one warning line each, where to back them up.
    The lab's synthetic backend chart makes no claim: the test gives it the one the real chart's
    PostgreSQL has, on the site's NFS share."""
    pv_name, claim = "pvc-runai-pg", "data-runai-backend-postgresql-0"
    path = f"{site.nfs.path}/runai-backend-{claim}"
    objects = [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
         "spec": {"capacity": {"storage": "8Gi"}, "accessModes": ["ReadWriteOnce"],
                  "nfs": {"server": site.nfs.server, "path": path}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": "runai-backend"},
         "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": pv_name,
                  "resources": {"requests": {"storage": "8Gi"}}}},
    ]  # fmt: skip
    _ssh_write("master1", "/root/runai-pg-claim.json", json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}).encode())  # fmt: skip
    run_as_root("master1", f"{KUBECTL} apply -f /root/runai-pg-claim.json")
    run = cli("backup", "--site", str(lab), timeout=900)
    assert run.rc == 0, (run.out[-3000:], run.err[-3000:])
    with capsys.disabled():
        print(
            "\n  "
            + "\n  ".join(
                ln for ln in (run.out + run.err).splitlines() if "volume" in ln or "backup on" in ln
            )
        )
    assert "Run:ai's own data (its database, its metrics) is NOT in this backup" in run.err
    assert f"runai-backend/{claim} (" in run.err and f"nfs {site.nfs.server}:{path}" in run.err
    where = next(
        ln.split(": ", 1)[1].split(" (")[0] for ln in run.out.splitlines() if ln.startswith("backup on")
    )
    record = json.loads(run_as_root("master1", f"cat {where}/runai-backend-volumes.json"))
    assert [v["claim"] for v in record["volumes"]] == [f"runai-backend/{claim}"]
    assert "runai-backend-volumes.json" in run_as_root("master1", f"cat {where}/SHA256SUMS")


def test_a_project_gone_from_the_site_is_deleted_unless_its_jobs_run(
    lab: Path, installs, cli, capsys
) -> None:
    """team-c leaves appliance.yml while a job's pod is in its namespace (runai-team-c, where
    Run:ai runs it): the install refuses, naming the project and the pod, and Run:ai keeps the
    project; `--force` deletes it, and the role's record of the projects it made drops it."""
    assert installs[0].rc == 0
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0-0", "namespace": "runai-team-c"},
           "spec": {"containers": [{"name": "main", "image": BUSYBOX, "command": ["sleep", "3600"]}]}}  # fmt: skip
    _ssh_write("master1", "/root/team-c-job.json", json.dumps(pod).encode())
    run_as_root(
        "master1", f"{KUBECTL} create namespace runai-team-c && {KUBECTL} create -f /root/team-c-job.json"
    )
    path = lab / "appliance.yml"
    before = path.read_text()
    data = yaml.safe_load(before)
    data["scheduler"]["projects"] = [p for p in data["scheduler"]["projects"] if p["name"] != "team-c"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    again = (
        "install",
        "--site",
        str(lab),
        "--tags",
        "scheduler_stack",
        "--skip-preflight",
        "--skip-diagnose",
    )
    try:
        refused = cli(*again, timeout=1800)
        kept = _api_state()["projects"]
        forced = cli(*again, "--force", timeout=1800)
    finally:
        path.write_text(before)
        run_as_root(
            "master1", f"{KUBECTL} delete namespace runai-team-c --ignore-not-found --wait=false || true"
        )
    with capsys.disabled():
        print("\n  " + "\n  ".join(ln for ln in refused.err.splitlines() if "team-c" in ln or "hint" in ln))
        print(f"  --force: {_finished(forced)}; recap {forced.recap}")
    assert refused.rc != 0 and "Traceback" not in refused.out + refused.err
    flat = " ".join(refused.err.split())
    assert "Run:ai projects gone from the site config still run jobs: team-c: train-0-0 (" in flat, flat[
        -2000:
    ]
    assert "appliance install --force" in flat
    assert set(kept) == {"team-a", "team-b", "team-c"}  # refused before any change
    assert forced.rc == 0, (forced.out[-3000:], forced.err[-3000:])
    assert set(_api_state()["projects"]) == {"team-a", "team-b"}
    assert json.loads(run_as_root("master1", "cat /etc/appliance/runai/projects.json")) == [
        "team-a",
        "team-b",
    ]
