"""control_plane's OIDC filters: the flags from the site's settings, kube-apiserver.yaml's command
list edited in place (only the --oidc-* items; every other byte kept), kubeadm's
ClusterConfiguration, and the running API server's mirror pod read back."""

from __future__ import annotations

import json

import pytest
import yaml

from tests._support.modules import load_file
from tests._support.paths import ROOT

f = load_file(
    "control_plane_oidc_filters",
    ROOT / "roles" / "control_plane" / "filter_plugins" / "control_plane_oidc.py",
)

# What kubeadm 1.23 writes (sigs.k8s.io/yaml: sorted keys, one command item a line), abridged.
MANIFEST = """\
apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 10.77.0.11:6443
  creationTimestamp: null
  labels:
    component: kube-apiserver
    tier: control-plane
  name: kube-apiserver
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-apiserver
    - --advertise-address=10.77.0.11
    - --allow-privileged=true
    - --authorization-mode=Node,RBAC
    - --client-ca-file=/etc/kubernetes/pki/ca.crt
    - --kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname
    - --proxy-client-cert-file=/etc/kubernetes/pki/front-proxy-client.crt
    - --secure-port=6443
    - --tls-private-key-file=/etc/kubernetes/pki/apiserver.key
    image: master1:5000/kube-apiserver:v1.23.17
    imagePullPolicy: IfNotPresent
    name: kube-apiserver   # an admin's comment stays
    resources:
      requests:
        cpu: 250m
  hostNetwork: true
status: {}
"""
FLAGS = {
    "oidc-issuer-url": "https://runai.lab.internal/auth/realms/runai",
    "oidc-client-id": "runai",
    "oidc-username-prefix": "-",
    "oidc-ca-file": "/etc/kubernetes/pki/oidc-ca.crt",
}


def command(text: str) -> list[str]:
    return yaml.safe_load(text)["spec"]["containers"][0]["command"]


def non_oidc_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not ln.strip().startswith(("- --oidc-", "- '--oidc-"))]


def test_flags_from_the_site_settings():
    settings = {"issuer_url": "https://idp/realms/x", "client_id": "k8s", "username_claim": "email",
                "username_prefix": "-", "groups_claim": "", "groups_prefix": "", "ca_file": "/site/ca.pem"}  # fmt: skip
    assert f.oidc_flags(settings, "/etc/kubernetes/pki/oidc-ca.crt") == {
        "oidc-ca-file": "/etc/kubernetes/pki/oidc-ca.crt",
        "oidc-client-id": "k8s",
        "oidc-issuer-url": "https://idp/realms/x",
        "oidc-username-claim": "email",
        "oidc-username-prefix": "-",
    }
    assert f.oidc_flags({}, "/x") == {} and f.oidc_flags(None, "/x") == {}
    assert "oidc-ca-file" not in f.oidc_flags(
        {"issuer_url": "https://i", "client_id": "c", "ca_file": ""}, "/x"
    )


def test_flags_added_in_kubeadms_order_and_nothing_else_changes():
    out = f.manifest_oidc(MANIFEST, FLAGS)
    cmd = command(out)
    assert cmd[cmd.index("--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname") + 1 :][:4] == [
        "--oidc-ca-file=/etc/kubernetes/pki/oidc-ca.crt",
        "--oidc-client-id=runai",
        "--oidc-issuer-url=https://runai.lab.internal/auth/realms/runai",
        "--oidc-username-prefix=-",
    ]
    assert non_oidc_lines(out) == MANIFEST.splitlines()  # byte for byte, the comment too
    assert "    - --oidc-client-id=runai\n" in out  # the list's own indentation
    assert f.manifest_oidc(out, FLAGS) == out  # a second run changes nothing


def test_a_flag_replaced_in_place_and_the_others_removed():
    first = f.manifest_oidc(MANIFEST, FLAGS)
    changed = dict(FLAGS, **{"oidc-issuer-url": "https://idp.example/realms/other"})
    del changed["oidc-username-prefix"]
    out = f.manifest_oidc(first, changed)
    oidc = [a for a in command(out) if a.startswith("--oidc-")]
    assert oidc == [
        "--oidc-ca-file=/etc/kubernetes/pki/oidc-ca.crt",
        "--oidc-client-id=runai",
        "--oidc-issuer-url=https://idp.example/realms/other",
    ]
    assert non_oidc_lines(out) == MANIFEST.splitlines()


def test_no_oidc_removes_every_oidc_flag_and_gives_back_the_original_bytes():
    assert f.manifest_oidc(f.manifest_oidc(MANIFEST, FLAGS), {}) == MANIFEST
    assert f.manifest_oidc(MANIFEST, {}) == MANIFEST  # nothing to do: the same text


def test_a_flag_appended_after_the_last_item_and_values_that_need_quotes():
    out = f.manifest_oidc(MANIFEST, {"oidc-username-prefix": "oidc: "})
    assert "--oidc-username-prefix=oidc: " in command(out)
    assert "    - '--oidc-username-prefix=oidc: '\n" in out
    assert non_oidc_lines(out) == MANIFEST.splitlines()
    short = (
        MANIFEST.split("    - --proxy-client-cert-file")[0] + "    image: x\n"
    )  # the last item sorts first
    out = f.manifest_oidc(short, {"oidc-username-prefix": "-"})
    assert command(out)[-1] == "--oidc-username-prefix=-"
    assert non_oidc_lines(out) == short.splitlines()


def test_duplicates_collapse_to_one():
    dup = MANIFEST.replace(
        "    - --secure-port=6443\n",
        "    - --oidc-client-id=a\n    - --secure-port=6443\n    - --oidc-client-id=b\n",
    )
    out = f.manifest_oidc(dup, {"oidc-client-id": "runai", "oidc-issuer-url": "https://i"})
    assert [a for a in command(out) if a.startswith("--oidc-client-id")] == ["--oidc-client-id=runai"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: kube-apiserver, command: [kube-apiserver, --a=b]}]}\n",
            "flow",
        ),
        ("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: x\n", "no command"),
        ("spec: [\n", "not YAML"),
        ("", "empty"),
    ],
)
def test_what_it_will_not_edit(text, says):
    with pytest.raises(f.OidcEditError, match=says):
        f.manifest_oidc(text, FLAGS)


def test_only_oidc_flags_are_accepted():
    with pytest.raises(f.OidcEditError, match="not OIDC flags: anonymous-auth"):
        f.manifest_oidc(MANIFEST, {"anonymous-auth": "true"})


CLUSTER_CONFIG = yaml.safe_dump(
    {
        "apiServer": {"certSANs": ["10.77.0.11", "master1"], "extraArgs": {"audit-log-maxage": "30"}},
        "apiVersion": "kubeadm.k8s.io/v1beta3",
        "clusterName": "kubernetes",
        "controlPlaneEndpoint": "10.77.0.11:6443",
        "kind": "ClusterConfiguration",
        "kubernetesVersion": "v1.23.17",
        "networking": {"podSubnet": "10.244.0.0/16"},
    },
    default_flow_style=False,
)


def test_cluster_configuration_keeps_its_other_extra_args():
    out = f.cluster_config_oidc(CLUSTER_CONFIG, FLAGS)
    doc, before = yaml.safe_load(out), yaml.safe_load(CLUSTER_CONFIG)
    assert doc["apiServer"]["extraArgs"] == {"audit-log-maxage": "30", **FLAGS}
    doc["apiServer"].pop("extraArgs"), before["apiServer"].pop("extraArgs")
    assert doc == before
    assert f.cluster_config_oidc(out, FLAGS) == out  # unchanged: the same text
    back = f.cluster_config_oidc(out, {})
    assert back == CLUSTER_CONFIG  # removed again: kubeadm's sorted dump, as it was


def test_cluster_configuration_without_extra_args_gets_them_and_loses_them():
    plain = CLUSTER_CONFIG.replace("  extraArgs:\n    audit-log-maxage: '30'\n", "")
    assert "extraArgs" not in plain
    out = f.cluster_config_oidc(plain, {"oidc-issuer-url": "https://i", "oidc-client-id": "c"})
    assert yaml.safe_load(out)["apiServer"]["extraArgs"] == {
        "oidc-client-id": "c",
        "oidc-issuer-url": "https://i",
    }
    assert f.cluster_config_oidc(out, {}) == plain
    with pytest.raises(f.OidcEditError, match="not a kubeadm ClusterConfiguration"):
        f.cluster_config_oidc("kind: InitConfiguration\n", FLAGS)


def test_the_running_api_server_read_from_its_mirror_pod():
    pod = yaml.safe_load(f.manifest_oidc(MANIFEST, FLAGS))
    pod["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    assert f.pod_state(json.dumps(pod), FLAGS) == "ok"
    assert f.pod_state(json.dumps(pod), {}) == "the running API server has other --oidc-* flags"
    pod["status"]["conditions"][0]["status"] = "False"
    assert f.pod_state(json.dumps(pod), FLAGS) == "the API server is not Ready"
    assert f.pod_state("", FLAGS) == "the API server does not answer"


def test_the_flags_a_manifest_gives_the_api_server():
    """What a restored manifest must be seen running with: its --oidc-* items, quoted or not."""
    assert f.manifest_flags(MANIFEST) == {}
    edited = f.manifest_oidc(MANIFEST, FLAGS | {"oidc-username-prefix": "-"})
    assert f.manifest_flags(edited) == FLAGS | {"oidc-username-prefix": "-"}
    with pytest.raises(f.OidcEditError, match=r"no spec\.containers"):
        f.manifest_flags("kind: Pod\n")
