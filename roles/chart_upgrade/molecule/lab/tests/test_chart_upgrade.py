"""chart_upgrade on the lab upgraded to v1.23.17, its provisioner still from the old bundle (testinfra
on the master): the release now runs the new bundle's chart with the values it had before (saved
0600 on the master, what `helm upgrade -f` was given), the state records the move, and no release
is left half-way."""

import json

import yaml

RELEASE, NAMESPACE, CHART = (
    "nfs-subdir-external-provisioner",
    "nfs-provisioner",
    "nfs-subdir-external-provisioner",
)
OLD_CHART, NEW_CHART = "4.0.17", "4.0.18"  # the old bundle's and the lab bundle's
HELM = "helm --kubeconfig /etc/kubernetes/admin.conf"
STATE = "/var/lib/appliance/upgrade/state.json"
SAVED = f"/var/lib/appliance/upgrade/values/{NAMESPACE}_{RELEASE}.yaml"


def _release(host):
    releases = json.loads(host.check_output(f"{HELM} list -A -o json"))
    return next(r for r in releases if r["name"] == RELEASE)


def test_the_release_runs_the_new_bundles_chart(host):
    rel = _release(host)
    assert rel["chart"] == f"{CHART}-{NEW_CHART}" and rel["namespace"] == NAMESPACE, rel
    assert rel["status"] == "deployed", rel
    history = json.loads(host.check_output(f"{HELM} history {RELEASE} -n {NAMESPACE} -o json"))
    assert [h["chart"] for h in history][-2:] == [f"{CHART}-{OLD_CHART}", f"{CHART}-{NEW_CHART}"], history


def test_the_values_it_had_were_saved_0600_and_given_to_the_upgrade(host):
    saved = host.file(SAVED)
    assert saved.is_file and saved.mode == 0o600 and saved.user == "root"
    now = json.loads(host.check_output(f"{HELM} get values {RELEASE} -n {NAMESPACE} -o json"))
    assert yaml.safe_load(saved.content_string) == now
    assert "nfs" in now  # the site's own values (server, path) among them


def test_the_state_records_the_chart_and_nothing_half_way(host):
    doc = json.loads(host.check_output(f"cat {STATE}"))
    state = doc["chart_upgrade"]  # its own key; kube_upgrade's beside it (module_utils/resumable_state.py)
    assert doc["schema"] == 1 and doc["kube_upgrade"]["target"] == state["target"] == "v1.23.17", doc
    assert state["charts"] == {f"{NAMESPACE}/{RELEASE}": f"{CHART} {OLD_CHART} -> {NEW_CHART}"}, state
    assert state.get("charts_upgrading", "") == "", state
