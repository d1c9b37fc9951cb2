"""bundle_repo on the lab's nodes: the verified bundle copied to master1 and served over HTTP."""

import json

import pytest


@pytest.fixture
def site(host):
    return host.ansible.get_variables()


def test_master_holds_the_manifest_the_gate_verified(host, site):
    if "masters" not in site["group_names"]:
        pytest.skip("the bundle copy lives on the master")
    manifest = host.file(f"{site['appliance_bundle_path']}/manifest.json")
    assert manifest.is_file
    assert manifest.sha256sum == site["appliance_bundle_manifest_sha256"]
    svc = host.service("appliance-bundle-http")
    assert svc.is_enabled
    assert svc.is_running


def test_every_node_reaches_the_served_bundle(host, site):
    """Asked from the node over the lab's bridge, not read from the master's disk."""
    url = f"http://{site['appliance_master_address']}:8081/"
    code = host.check_output(
        "python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).status)' %s",
        url,
    )
    assert code == "200"


def test_the_view_lists_the_manifest_artifacts(host, site):
    if "masters" not in site["group_names"]:
        pytest.skip("the view lives on the master")
    view = json.loads(host.file("/srv/appliance/www/.bundle-view.json").content_string)
    assert view, "bundle_view published nothing"
