"""researcher_cli on worker1 (the jumpbox's stand-in), read back from the node (testinfra)."""

import json

BIN = "/opt/molecule-researcher-cli/bin"
COMPLETION = "/opt/molecule-researcher-cli/bash_completion.d"


def test_kubectl_is_the_bundles_root_owned_and_runs(host):
    f = host.file(f"{BIN}/kubectl")
    assert f.is_file and f.user == "root" and f.mode == 0o755
    version = json.loads(host.check_output(f"{BIN}/kubectl version --client -o json"))
    # the lab bundle's kubectl artifact is Debian's client (a static binary), not the node's stand-in
    assert version["clientVersion"]["gitVersion"].startswith("v1."), version


def test_only_the_open_stacks_cli_is_installed(host):
    """The lab site's stack is open (HAMi + Volcano): no runai CLI."""
    assert not host.file(f"{BIN}/runai").exists


def test_bash_loads_the_completion(host):
    f = host.file(f"{COMPLETION}/kubectl")
    assert f.is_file and f.user == "root" and f.mode == 0o644
    out = host.check_output(f"bash -c 'source {COMPLETION}/kubectl && complete -p kubectl'")
    assert "__start_kubectl" in out and out.rstrip().endswith(" kubectl"), out
