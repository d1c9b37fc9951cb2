"""Take one preparation step away from a joined worker and kubeadm must refuse to join it, with the
words the real kubeadm 1.23 prints; then `appliance install` puts the step back and rejoins it.
It resets a worker of its own copy of the installed lab. Destructive: on a real site
(APPLIANCE_E2E_SITE) only with APPLIANCE_E2E_DESTRUCTIVE=1."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.usefixtures("installs")

KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"


@pytest.fixture(scope="module")
def reset_worker(site, hosts):
    if os.environ.get("APPLIANCE_E2E_SITE") and os.environ.get("APPLIANCE_E2E_DESTRUCTIVE") != "1":
        pytest.skip("resets a worker: set APPLIANCE_E2E_DESTRUCTIVE=1 to run it on a real site")
    name = [n for n in site.nodes if "master" not in n.roles][-1].name
    master, worker = hosts[site.master.name], hosts[name]
    assert master.run(f"{KUBECTL} delete node {name}").rc == 0
    r = worker.run("kubeadm reset -f")
    assert r.rc == 0, r.stderr[-1000:]
    assert not worker.file("/etc/kubernetes/kubelet.conf").exists
    # the join command holds a token: it stays inside this fixture, never in an assertion message
    join = master.check_output("kubeadm token create --print-join-command --ttl 10m").strip()
    assert join.startswith("kubeadm join ")
    yield name, worker, join
    # This test, unlike the product (a 0600 JoinConfiguration), runs `kubeadm join --token` by hand
    # through sudo, which logs the command line in the worker's journal: the token is deleted so
    # secrets grep (test_faults) finds no live token there (on a real site nothing is restored between).
    token_id = join.split("--token", 1)[1].split()[0].split(".")[0]
    assert master.run(f"kubeadm token delete {token_id}").rc == 0


def _join_fails(worker, join: str) -> str:
    r = worker.run(join)
    assert r.rc != 0, "kubeadm join succeeded although a preparation step is missing"
    out = r.stdout + r.stderr
    assert "[preflight] Some fatal errors occurred:" in out
    assert "error execution phase preflight: [preflight] Some fatal errors occurred:" in out
    assert "--ignore-preflight-errors=..." in out
    return out


# (how to take the step away, how to put it back, the line kubeadm 1.23 prints)
MISSING_STEPS = {
    "containerd stopped": (
        "systemctl stop containerd",
        "systemctl start containerd",
        "[ERROR CRI]: container runtime is not running: output: ",
    ),
    "ip_forward off": (
        "sysctl -w net.ipv4.ip_forward=0",
        "sysctl -w net.ipv4.ip_forward=1",
        "[ERROR FileContent--proc-sys-net-ipv4-ip_forward]: /proc/sys/net/ipv4/ip_forward contents are not set to 1",
    ),
}


@pytest.mark.parametrize("step", list(MISSING_STEPS))
def test_join_fails_with_kubeadms_words_when_a_step_is_missing(reset_worker, step):
    _, worker, join = reset_worker
    take_away, put_back, expected = MISSING_STEPS[step]
    worker.run(take_away)
    try:
        out = _join_fails(worker, join)
    finally:
        worker.run(put_back)
    assert expected in out
    assert not worker.file("/etc/kubernetes/kubelet.conf").exists  # nothing half-done


def test_install_rejoins_the_reset_worker(site, hosts, reset_worker, cli):
    name, worker, _ = reset_worker
    assert not worker.file("/etc/kubernetes/kubelet.conf").exists  # still reset: the install must rejoin it
    # what a join that died half-way leaves (kubeadm's preflight refuses both): the install undoes it
    planted = worker.run("mkdir -p /etc/kubernetes/pki && touch /etc/kubernetes/bootstrap-kubelet.conf "
                         "/etc/kubernetes/pki/ca.crt")  # fmt: skip
    assert planted.rc == 0, planted.stderr
    # the day-2 way: only that worker in the run; what it needs from the master (bundle index, CA,
    # pull password, join command, its labels) is done from there by delegation
    r = cli("install", "--site", str(site.site_dir), "--limit", name)
    assert r.rc == 0, r.err[-2000:]
    assert set(r.recap) == {name}
    assert r.recap[name]["changed"] > 0
    node = next(n for n in site.nodes if n.name == name)
    labels = hosts[site.master.name].check_output(
        f"{KUBECTL} get node {name} -o jsonpath='{{.metadata.labels}}'"
    )
    assert f'"run.ai/type":"{node.hardware_class}"' in labels
    for role in set(node.roles) & {"gpu-worker", "cpu-worker"}:
        assert f'"node-role.kubernetes.io/runai-{role}":"true"' in labels
    ready = hosts[site.master.name].check_output(
        f"{KUBECTL} get node {name} -o jsonpath='{{.status.conditions[?(@.type==\"Ready\")].status}}'"
    )
    assert ready == "True"
