"""`appliance user kubeconfig NAME --project P`: the cluster from the master's admin.conf, an OIDC
user (Run:ai's client configuration on a runai site, kubectl's oidc auth-provider otherwise), the
project's namespace, never the admin's credentials; refusals in one line; the file 0600."""

from __future__ import annotations

import base64
import copy
import stat
from pathlib import Path

import pytest
import yaml

from appliance_cli.cli.main import main
from appliance_cli.core import researcher
from appliance_cli.core.siteconfig import parse_site
from appliance_cli.errors import ApplianceError, UsageError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((REPO / "inventories" / "example" / "appliance.yml").read_text())
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\ncluster-ca\n-----END CERTIFICATE-----\n").decode()
ADMIN_CONF = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubernetes", "cluster": {"certificate-authority-data": CA, "server": "https://10.0.0.3:6443"}}],
        "contexts": [{"name": "kubernetes-admin@kubernetes", "context": {"cluster": "kubernetes", "user": "kubernetes-admin"}}],
        "current-context": "kubernetes-admin@kubernetes",
        "users": [{"name": "kubernetes-admin", "user": {"client-certificate-data": "QURNSU4tQ0VSVA==",
                                                         "client-key-data": "QURNSU4tS0VZ"}}],
    }
)  # fmt: skip


def site(tmp_path: Path, **scheduler) -> object:
    data = copy.deepcopy(EXAMPLE)
    data["scheduler"].update(scheduler)
    return parse_site(data, source=tmp_path / "appliance.yml")


def test_runai_kubeconfig_has_runai_client_configuration_and_project_namespace(tmp_path):
    cfg = site(tmp_path)
    doc = yaml.safe_load(researcher.researcher_kubeconfig(cfg, "alice", "team-b", ADMIN_CONF))
    assert doc["clusters"] == [
        {
            "name": "kubernetes",
            "cluster": {"certificate-authority-data": CA, "server": "https://10.0.0.3:6443"},
        }
    ]
    assert doc["users"] == [
        {
            "name": "runai-authenticated-user",
            "user": {
                "auth-provider": {
                    "name": "oidc",
                    "config": {
                        "airgapped": "true",
                        "auth-flow": "cli",
                        "realm": "runai",
                        "client-id": "runai",
                        "idp-issuer-url": "https://runai.acme.example/auth/realms/runai",
                    },
                }
            },
        }
    ]
    (ctx,) = doc["contexts"]
    assert doc["current-context"] == ctx["name"] == "alice@acme-ai-lab-team-b"
    assert ctx["context"] == {
        "cluster": "kubernetes",
        "user": "runai-authenticated-user",
        "namespace": "runai-team-b",
    }


def test_no_admin_credentials_in_it(tmp_path):
    text = researcher.researcher_kubeconfig(site(tmp_path), "alice", "team-a", ADMIN_CONF)
    for secret in ("client-certificate", "client-key", "QURNSU4", "token", "kubernetes-admin", "password"):
        assert secret not in text


def test_open_stack_uses_kubectls_oidc_provider_with_the_issuers_ca(tmp_path):
    (tmp_path / "idp-ca.pem").write_text("-----BEGIN CERTIFICATE-----\nidp\n-----END CERTIFICATE-----\n")
    oidc = {"issuer_url": "https://idp.example/realms/lab", "client_id": "k8s", "ca_file": "idp-ca.pem"}
    cfg = site(tmp_path, stack="open", oidc=oidc)
    doc = yaml.safe_load(researcher.researcher_kubeconfig(cfg, "bob", "team-c", ADMIN_CONF))
    (user,) = doc["users"]
    assert user["name"] == "bob"
    config = user["user"]["auth-provider"]["config"]
    assert config["client-id"] == "k8s" and config["idp-issuer-url"] == "https://idp.example/realms/lab"
    assert (
        base64.b64decode(config["idp-certificate-authority-data"]) == (tmp_path / "idp-ca.pem").read_bytes()
    )
    assert doc["contexts"][0]["context"]["namespace"] == "project-team-c"  # siteconfig.project_namespace


def test_refuses_an_unknown_project_naming_the_known_ones(tmp_path):
    with pytest.raises(UsageError) as exc:
        researcher.researcher_kubeconfig(site(tmp_path), "alice", "team-z", ADMIN_CONF)
    assert exc.value.message == "unknown project 'team-z' (known: team-a, team-b, team-c, team-d)"


def test_refuses_a_site_without_oidc(tmp_path):
    with pytest.raises(UsageError, match=r"no researcher authentication \(scheduler.oidc\)"):
        researcher.researcher_kubeconfig(site(tmp_path, stack="open"), "alice", "team-a", ADMIN_CONF)


def test_refuses_an_admin_conf_without_a_cluster(tmp_path):
    with pytest.raises(ApplianceError, match="no cluster server and embedded CA"):
        researcher.researcher_kubeconfig(site(tmp_path), "alice", "team-a", "apiVersion: v1\nkind: Config\n")


def test_cli_writes_0600_and_refuses_in_one_line(tmp_path, monkeypatch, capsys):
    data = copy.deepcopy(EXAMPLE)
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr("appliance_cli.core.cluster.admin_kubeconfig", lambda cfg: ADMIN_CONF)
    out = tmp_path / "alice.conf"
    out.write_text("old")
    out.chmod(0o644)
    assert (
        main(
            ["user", "kubeconfig", "alice", "--project", "team-a", "--site", str(tmp_path), "--out", str(out)]
        )
        == 0
    )
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert yaml.safe_load(out.read_text())["contexts"][0]["context"]["namespace"] == "runai-team-a"
    capsys.readouterr()
    assert main(["user", "kubeconfig", "alice", "--project", "nope", "--site", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown project 'nope' (known: team-a, team-b, team-c, team-d)" in err
    assert "Traceback" not in err
