"""No secret the site holds reaches a run's artifacts or the events the CLI renders.

The registry role's PKI and pull-auth tasks run for real (real openssl and htpasswd, on a
temporary tree) through the product's runner adapter, which keeps every job event under
runs/ as `appliance install` does; then every artifact file and every domain event is searched
for the pull password and for the CA and TLS private keys. Removing a `no_log` from those
tasks makes this test fail. (The join token is made by kubeadm on a master: covered by the lab.)
"""

from __future__ import annotations

import grp
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from appliance_cli.runner.adapter import AnsibleRunner
from appliance_cli.runner.events import RunRequest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not (shutil.which("openssl") and shutil.which("htpasswd") and "docker-registry" in {g.gr_name for g in grp.getgrall()}),
        reason="needs openssl, apache2-utils (htpasswd) and the docker-registry group: scripts/bootstrap.sh installs them",
    ),
]  # fmt: skip


def _playbook(tmp: Path) -> Path:
    play = {
        "name": "Registry secrets",
        "hosts": "all",
        "gather_facts": False,
        "vars": {
            "appliance_site_name": "secrets-test",
            "appliance_master": "master1",
            "appliance_master_address": "127.0.0.1",
            "appliance_registry_address": "127.0.0.1:5000",
            "appliance_bundle_path": str(tmp / "bundle"),
            "registry_pki_dir": str(tmp / "pki"),
            # the password's path comes from the paths contract; the auth directory is its parent
            "appliance_paths_registry_password": str(tmp / "auth" / "appliance.password"),
        },
        "tasks": [
            {"name": f"Run {f}", "ansible.builtin.include_role": {"name": "registry", "tasks_from": f}}
            for f in ("0030-pki.yml", "0040-auth.yml")
        ]
        # The role's handlers restart the registry service of this machine: not here.
        + [{"name": "Stop before the handlers", "ansible.builtin.meta": "end_play"}],
    }
    path = tmp / "secrets.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


def _key_lines(pem: Path) -> list[str]:
    body = [ln for ln in pem.read_text().splitlines() if ln and not ln.startswith("-----")]
    assert len(body) > 5, f"{pem} holds no key"
    return body


def test_registry_password_and_private_keys_never_reach_artifacts_or_events(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    events: list[object] = []
    req = RunRequest(
        playbook=_playbook(tmp_path), inventory=inv, private_data_dir=tmp_path / "runs" / "r1", extravars={}
    )
    result = AnsibleRunner().run(req, events.append)
    assert result.ok, result
    password = next((tmp_path / "auth").glob("*.password")).read_text().strip()
    secrets = {"pull password": password}
    for key in ("registry-ca.key", "registry.key"):
        for i, line in enumerate(_key_lines(tmp_path / "pki" / key)):
            secrets[f"{key} line {i}"] = line
    assert len(password) >= 24

    leaks = []
    for f in sorted(p for p in result.artifact_dir.rglob("*") if p.is_file()):
        text = f.read_text(errors="replace")
        leaks += [f"{name} in {f.relative_to(tmp_path)}" for name, s in secrets.items() if s in text]
    rendered = "\n".join(repr(e) for e in events)
    leaks += [f"{name} in the events the CLI renders" for name, s in secrets.items() if s in rendered]
    assert not leaks, leaks
    # the run really produced events and artifacts to search
    assert any((result.artifact_dir / "job_events").iterdir()) and events
