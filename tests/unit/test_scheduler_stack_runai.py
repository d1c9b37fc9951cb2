"""The runai stack's values and API plans (roles/scheduler_stack/filter_plugins), the admin
password generator, and the Run:ai API test server they are exercised against in the e2e."""

from __future__ import annotations

import importlib.util
import json
import os
import ssl
import stat
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests._support import runai_api
from tests._support.runai_vendor import backend_values, cluster_values
from tests._support.tlscerts import ca_pem, make_ca, make_leaf

ROLE = Path(__file__).resolve().parents[2] / "roles" / "scheduler_stack"
REG = "master1:5000"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


f = _load("scheduler_stack_runai", ROLE / "filter_plugins" / "scheduler_stack_runai.py")
pwgen = _load("runai_admin_password", ROLE / "files" / "runai-admin-password.py")


def _backend(**over):
    args = dict(registry=REG, domain="runai.lab.internal", external_ip="10.77.0.200", nfs_server="10.77.0.11",
                nfs_path="/srv/nfs/appliance", tls_secret="runai-backend-tls", admin_email="admin@runai.lab.internal")  # fmt: skip
    args.update(over)
    return f.runai_backend_values(backend_values("2.9.0"), **args)


def test_backend_values_carry_the_site_and_only_private_images() -> None:
    v = _backend()
    g = v["global"]
    assert (g["domain"], g["airgapped"], g["ingress"]["tlsSecretName"]) == (
        "runai.lab.internal",
        True,
        "runai-backend-tls",
    )
    assert g["nodeSelector"] == {"node-role.kubernetes.io/runai-system": "true"}
    assert g["tolerations"] == [  # the control-plane taint: what kubeadm 1.24 adds on upgrade
        {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert v["nginx-ingress"]["controller"]["service"]["externalIPs"] == ["10.77.0.200"]
    assert v["nfs-client-provisioner"]["nfs"] == {"server": "10.77.0.11", "path": "/srv/nfs/appliance"}
    assert v["tenantsManager"]["config"]["adminUsername"] == "admin@runai.lab.internal"
    images = f.release_images(v, backend_values("2.9.0"))
    assert len(images) == 5 and all(
        i.startswith(f"{REG}/run-ai-prod/") and i.endswith(":2.9.0") for i in images
    )


def test_backend_values_refuse_a_missing_site_field() -> None:
    with pytest.raises(f.RunaiValuesError, match=r"scheduler\.external_ip is empty"):
        _backend(external_ip="")


def test_cluster_values_and_the_client_secret() -> None:
    v = f.runai_cluster_values(cluster_values("2.9.0"), REG, "runai.lab.internal", "uid-1", "s3cr3t")
    assert v["controlPlane"] == {"url": "https://runai.lab.internal", "clientSecret": "s3cr3t"}
    assert v["cluster"] == {"uid": "uid-1", "url": "https://runai.lab.internal"}
    assert v["global"]["nodeSelector"] == {"node-role.kubernetes.io/runai-system": "true"}
    assert f.release_images(v, cluster_values("2.9.0")) == [
        f"{REG}/run-ai-prod/{n}:2.9.0" for n in ("agent", "operator", "scheduler")
    ]
    info = {
        "installationStr": "helm upgrade -i runai-cluster \\\n--set controlPlane.clientSecret=abc123 \\\n--set cluster.uid=u"
    }
    assert f.runai_client_secret(info) == "abc123"
    assert f.runai_client_secret({"clientSecret": "x", "installationStr": ""}) == "x"


def test_prerequisite_values_move_every_enabled_image_and_clear_digests() -> None:
    import yaml

    repo = ROLE.parents[1]
    for chart, version, n in (("ingress-nginx", "4.5.2", 2), ("kube-prometheus-stack", "45.7.1", 7)):
        ours = yaml.safe_load((repo / "bundles" / "values" / f"{chart}-{version}.yaml").read_text())
        defaults = yaml.safe_load(
            (repo / "tests" / "fixtures" / "charts" / chart / "values.yaml").read_text()
        )
        v = f.private_values(ours, REG)
        images = f.release_images(v, defaults)
        assert len(images) == n and all(i.startswith(f"{REG}/") for i in images), images
        profile = (repo / "bundles" / "profiles" / "lab.yml").read_text()
        for ref in images:  # the lab bundle carries each one under its upstream name
            assert ref.replace(f"{REG}/", "", 1).split(":")[0] in profile, ref
    assert "grafana" not in " ".join(f.release_images(f.private_values(ours, REG), defaults))


def test_an_image_without_a_tag_is_named() -> None:
    with pytest.raises(f.RunaiValuesError, match=r"prometheusOperator\.image\.tag is empty"):
        f.release_images(
            {"prometheusOperator": {"image": {"registry": "quay.io", "repository": "x", "tag": ""}}}
        )


PROJECTS = [{"name": "team-a", "gpus": 2, "department": "research", "over_quota": True},
            {"name": "team-b", "gpus": 1, "department": "research", "over_quota": False},
            {"name": "team-c", "gpus": 1, "department": "default", "over_quota": True}]  # fmt: skip
DEPARTMENTS = [{"name": "research", "gpus": 3}]


def test_quotas_are_checked_against_the_site_gpus() -> None:
    assert f.quota_problem(DEPARTMENTS, PROJECTS, 4) == ""
    assert "add up to 4, the gpu-worker nodes have 3" in f.quota_problem(DEPARTMENTS, PROJECTS, 3)
    assert "research has 2 GPUs, its projects ask for 3" in f.quota_problem(
        [{"name": "research", "gpus": 2}], PROJECTS, 4
    )


def test_plans_create_then_change_only_what_differs() -> None:
    deps = [{"id": "1", "name": "default", "clusterId": "c", "resources": f._resources(0, True)}]
    plan = f.department_plan(deps, DEPARTMENTS, PROJECTS, "c")
    assert [(o["name"], o["method"], o["suffix"]) for o in plan] == [
        ("default", "PUT", "/1/resources"),
        ("research", "POST", ""),
    ]
    deps = [
        deps[0] | {"resources": plan[0]["body"]},
        {"id": "2", "name": "research", "clusterId": "c", **plan[1]["body"]},
    ]
    assert f.department_plan(deps, DEPARTMENTS, PROJECTS, "c") == []
    plan = f.project_plan([], PROJECTS, deps, "c")
    assert [(o["name"], o["body"]["parentId"]) for o in plan] == [
        ("team-a", "2"),
        ("team-b", "2"),
        ("team-c", "1"),
    ]
    assert plan[1]["body"]["resources"][0]["gpu"] == {"deserved": 1, "limit": 1, "overQuotaWeight": 0}
    current = [{"id": str(10 + i), "clusterId": "c", **o["body"]} for i, o in enumerate(plan)]
    assert f.project_plan(current, PROJECTS, deps, "c") == []
    more = [dict(PROJECTS[0], gpus=1), *PROJECTS[1:]]
    assert [(o["name"], o["method"]) for o in f.project_plan(current, more, deps, "c")] == [("team-a", "PUT")]


def test_refused_calls_are_named_without_secrets() -> None:
    results = [{"status": 201, "item": {"name": "ok"}},
               {"status": 400, "item": {"name": "team-a"}, "json": {"message": "too many GPUs"}}]  # fmt: skip
    assert f.refused(results) == ["team-a: HTTP 400 too many GPUs"]


def test_the_generated_password_is_strong_and_0600(tmp_path: Path) -> None:
    path = tmp_path / "admin-password.new"
    assert pwgen.main(str(path)) == 0
    pw = path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(pw) == 24 and any(c.isupper() for c in pw) and any(c.isdigit() for c in pw)
    with pytest.raises(FileExistsError):  # never overwrites the one being changed to
        pwgen.main(str(path))
    assert len({pwgen.generate() for _ in range(20)}) == 20


# ---- the API test server -----------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runai-api")
    ca = make_ca("Lab CA")
    cert, key = make_leaf(ca, ["runai.lab.internal"], ips=["127.0.0.1"])
    (tmp / "c.pem").write_bytes(cert)
    (tmp / "k.pem").write_bytes(key)
    (tmp / "ca.pem").write_bytes(ca_pem(ca))
    httpd = runai_api.serve("127.0.0.1", 0, str(tmp / "c.pem"), str(tmp / "k.pem"), str(tmp / "state.json"),
                            "admin@runai.lab.internal", "runai.lab.internal")  # fmt: skip
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    ctx = ssl.create_default_context(cafile=str(tmp / "ca.pem"))
    yield f"https://127.0.0.1:{httpd.server_address[1]}", ctx, tmp / "state.json"
    httpd.shutdown()


def _call(server, method, path, body=None, token=None, form=None):
    base, ctx, _ = server
    data, headers = None, {}
    if form is not None:
        data = urllib.parse.urlencode(form).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    elif body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(base + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, context=ctx) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _login(server, pw):
    return _call(server, "POST", "/auth/realms/runai/protocol/openid-connect/token",
                 form={"grant_type": "password", "client_id": "runai", "username": "admin@runai.lab.internal", "password": pw})  # fmt: skip


def test_the_api_server_enforces_what_runai_would(server) -> None:
    assert _login(server, "wrong")[0] == 401
    assert _call(server, "GET", "/api/v1/clusters")[0] == 401
    st, tok = _login(server, "password")  # the default, valid until changed
    assert st == 200
    token = tok["access_token"]
    assert (
        _call(
            server,
            "POST",
            "/api/v1/me/password",
            {"currentPassword": "password", "newPassword": "short"},
            token,
        )[0]
        == 400
    )
    new = "Abcdefgh1234XYZ"
    assert (
        _call(
            server, "POST", "/api/v1/me/password", {"currentPassword": "password", "newPassword": new}, token
        )[0]
        == 200
    )
    assert (
        _login(server, "password")[0] == 401
        and _call(server, "GET", "/api/v1/clusters", token=token)[0] == 401
    )
    token = _login(server, new)[1]["access_token"]
    st, c = _call(server, "POST", "/api/v1/clusters", {"name": "lab", "version": "2.9.0"}, token)
    assert st == 201 and _call(server, "POST", "/api/v1/clusters", {"name": "lab"}, token)[0] == 409
    info = _call(
        server, "GET", f"/api/v1/clusters/{c['uuid']}/cluster-install-info?version=2.9.0", token=token
    )[1]
    assert f.runai_client_secret(info) == info["clientSecret"] and "secret" not in json.dumps(
        _call(server, "GET", "/api/v1/clusters", token=token)[1]
    )
    deps = _call(server, "GET", "/api/v1/org-unit/departments", token=token)[1]
    for op in f.department_plan(deps, DEPARTMENTS, PROJECTS, c["uuid"]):
        assert _call(server, op["method"], "/api/v1/org-unit/departments" + op["suffix"], op["body"], token)[
            0
        ] in (200, 201)
    deps = _call(server, "GET", "/api/v1/org-unit/departments", token=token)[1]
    for op in f.project_plan([], PROJECTS, deps, c["uuid"]):
        assert (
            _call(server, op["method"], "/api/v1/org-unit/projects" + op["suffix"], op["body"], token)[0]
            == 201
        )
    projects = _call(server, "GET", "/api/v1/org-unit/projects", token=token)[1]
    assert f.project_plan(projects, PROJECTS, deps, c["uuid"]) == []
    dup = f.project_plan([], PROJECTS[:1], deps, c["uuid"])[0]["body"]
    assert _call(server, "POST", "/api/v1/org-unit/projects", dup, token)[0] == 409
    over = dict(dup, name="team-z", resources=f._resources(5, True))  # research would have 8 > 3
    st, err = _call(server, "POST", "/api/v1/org-unit/projects", over, token)
    assert st == 400 and "more than its 3" in err["message"]
    bad = dict(dup, name="team-y", resources=[{"nodePool": {"name": "default"}, "gpu": {"deserved": -1}}])
    assert _call(server, "POST", "/api/v1/org-unit/projects", bad, token)[0] == 400
    # a project the site no longer has, which the role made (the record), is deleted; one made in
    # Run:ai's UI (never recorded) is not
    ui = dict(dup, name="team-ui", resources=f._resources(0, True))
    assert _call(server, "POST", "/api/v1/org-unit/projects", ui, token)[0] == 201
    projects = _call(server, "GET", "/api/v1/org-unit/projects", token=token)[1]
    record = json.dumps(sorted(p["name"] for p in PROJECTS))
    stale = f.stale_projects(projects, PROJECTS[1:], record, c["uuid"])
    assert [p["name"] for p in stale] == [PROJECTS[0]["name"]]
    results = []
    for p in stale:
        st, _ = _call(server, "DELETE", f"/api/v1/org-unit/projects/{p['id']}", token=token)
        results.append({"status": st, "item": p})
    assert f.refused(results) == []
    left = {p["name"] for p in _call(server, "GET", "/api/v1/org-unit/projects", token=token)[1]}
    assert left == {p["name"] for p in PROJECTS[1:]} | {"team-ui"}
    assert f.stale_projects(list(projects), PROJECTS, record, c["uuid"]) == []
    st, err = _call(server, "DELETE", f"/api/v1/org-unit/projects/{stale[0]['id']}", token=token)
    assert st == 404 and f.refused([{"status": st, "item": stale[0], "json": err}]) == [
        f"{stale[0]['name']}: HTTP 404 project {stale[0]['id']} not found"
    ]
    state = server[2]
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o600


# ---- the role's second look at the certificate, on the master (openssl, tasks/runai/0010) -----


def _master_check_argv() -> list[str]:
    import yaml

    tasks = yaml.safe_load((ROLE / "tasks" / "runai" / "0010-check.yml").read_text())
    [task] = [t for t in tasks if t["name"] == "Run:ai | Check the certificate on the master"]
    return task["ansible.builtin.command"]["argv"]


@pytest.mark.parametrize(
    "case, names, days, other_ca, want",
    [
        ("good", ["runai.lab.internal"], 365, False, ["chain-ok", "expiry-ok", "does match"]),
        ("another name", ["runai.other.internal"], 365, False, ["chain-ok", "expiry-ok", "does NOT match"]),
        ("another CA", ["runai.lab.internal"], 365, True, ["expiry-ok", "does match"]),
        ("10 days", ["runai.lab.internal"], 10, False, ["chain-ok", "does match"]),
    ],
)
def test_the_master_side_check_sees_what_the_controller_saw(
    tmp_path: Path, case, names, days, other_ca, want
) -> None:
    """The shell line the role runs on the master (the task's own argv, with its directory and
    domain filled in) prints chain-ok / expiry-ok only when they hold, and openssl's host match."""
    import shutil
    import subprocess

    if not shutil.which("openssl"):
        pytest.skip("no openssl on this host")
    ca = make_ca("Lab CA")
    cert, _ = make_leaf(make_ca("Other CA") if other_ca else ca, names, days=days)
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "ca.crt").write_bytes(ca_pem(ca))
    argv = _master_check_argv()
    argv = [a.replace("{{ scheduler_stack_runai_dir }}", str(tmp_path))
             .replace("{{ scheduler_stack_runai_domain }}", "runai.lab.internal") for a in argv]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
    lines = [ln for ln in out.splitlines() if ln]
    got = [
        ln if ln in ("chain-ok", "expiry-ok") else ("does NOT match" if "NOT" in ln else "does match")
        for ln in lines
    ]
    assert got == want, (case, out)


def test_stale_projects_are_only_the_recorded_ones_of_this_cluster() -> None:
    """The record is the role's own list; a project of another cluster, or never recorded, is
    never deleted; no record yet deletes nothing; a record that is no list of names is named."""
    current = [{"name": "gone", "id": "7", "clusterId": "c1"}, {"name": "gone", "id": "8", "clusterId": "c2"},
               {"name": "kept", "id": "9", "clusterId": "c1"}, {"name": "ui-made", "id": "10", "clusterId": "c1"}]  # fmt: skip
    site = [{"name": "kept", "gpus": 1}]
    assert f.stale_projects(current, site, '["gone", "kept"]\n', "c1") == [{"name": "gone", "id": "7"}]
    assert f.stale_projects(current, site, "", "c1") == []
    for bad in ("{not json", '{"gone": 1}', "[1, 2]"):
        with pytest.raises(f.RunaiValuesError, match="not a JSON list of names: remove it"):
            f.stale_projects(current, site, bad, "c1")


def test_the_jobs_still_running_in_a_project_to_delete_are_named() -> None:
    def pod(ns: str, name: str, phase: str | None) -> dict:
        return {"metadata": {"namespace": ns, "name": name}, "status": {"phase": phase} if phase else {}}

    pods = json.dumps({"items": [
        pod("runai-gone", "train-1-0", "Running"), pod("runai-gone", "train-0-0", "Succeeded"),
        pod("runai-gone", "queued-0", None), pod("runai-other", "x-0", "Running"), pod("gone", "y", "Running"),
        pod("runai-idle", "done-0", "Failed"),
    ]})  # fmt: skip
    stale = [{"name": "gone", "id": "7"}, {"name": "idle", "id": "8"}]
    busy = f.project_jobs(stale, pods, "runai-")
    assert busy == {"gone": ["queued-0 (Pending)", "train-1-0 (Running)"]}
    assert f.jobs_refusal(busy) == "gone: queued-0 (Pending), train-1-0 (Running)"
    assert f.project_jobs(stale, "", "runai-") == {}
    stack = __import__("yaml").safe_load((ROLE / "defaults" / "main.yml").read_text())
    from appliance_cli.core.siteconfig import project_namespace

    assert stack["scheduler_stack_runai_namespace_prefix"] + "gone" == project_namespace("runai", "gone")


def test_an_id_that_is_no_id_never_reaches_a_url() -> None:
    """An org unit's id from the API goes into the calls' paths: a number or a UUID, else refused."""
    odd = [{"name": "gone", "id": "../departments/1", "clusterId": "c1"}]
    with pytest.raises(
        f.RunaiValuesError, match=r"answered 'gone' with the id '\.\./departments/1': not an id"
    ):
        f.stale_projects(odd, [], '["gone"]', "c1")
    current = [{"name": "research", "id": "7/x", "clusterId": "c1", "resources": []}]
    with pytest.raises(f.RunaiValuesError, match="not an id"):
        f.department_plan(current, DEPARTMENTS, PROJECTS, "c1")
    uuid_id = [{"name": "gone", "id": "0c2b1d4e-1111-2222-3333-444455556666", "clusterId": "c1"}]
    assert f.stale_projects(uuid_id, [], '["gone"]', "c1")[0]["id"] == uuid_id[0]["id"]
