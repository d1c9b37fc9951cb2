"""registry on the lab's nodes: a TLS registry on the master that asks for credentials, whose CA
every node trusts."""

import pytest

CA = "/usr/local/share/ca-certificates/appliance-registry-ca.crt"


@pytest.fixture
def site(host):
    return host.ansible.get_variables()


def test_the_registry_and_its_ca_key_live_on_the_master_only(host, site):
    """The service runs on the master; a worker runs none and never holds the CA's private key."""
    svc = host.service("docker-registry")
    key = host.file("/etc/appliance/pki/registry-ca.key")
    if "masters" in site["group_names"]:
        assert svc.is_enabled
        assert svc.is_running
        assert key.mode == 0o600
    else:
        assert not svc.is_running
        assert not key.exists


def test_every_node_trusts_the_ca_and_the_registry_asks_for_credentials(host, site):
    """TLS verified against the CA on the node; no credentials given, so the API answers 401."""
    assert host.file(CA).contains("BEGIN CERTIFICATE")
    code = host.check_output(
        "curl -s -o /dev/null -w '%%{http_code}' --cacert %s https://%s/v2/",
        CA,
        site["appliance_registry_address"],
    )
    assert code == "401"
