"""A role run by ansible-playbook against localhost, with the stand-in helm and Debian's real kubectl
(the lab nodes' client, tests/_support/real_kubectl.py) on PATH talking to a stand-in API server
(tests/_support/standin_cluster.py), and a loopback HTTP server standing for the master's bundle
server. For integration tests of roles whose cluster side the lab's open stack never takes (the
Run:ai paths)."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests._support.real_kubectl import real_kubectl
from tests._support.standin_cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOK = str(BIN / "ansible-playbook") if (BIN / "ansible-playbook").exists() else "ansible-playbook"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict]:
    if os.geteuid() != 0:
        pytest.skip("the role writes files owned by root")
    (tmp_path / "cluster").mkdir()
    cluster = Cluster(tmp_path / "cluster")
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "helm").write_text(
        f"#!/bin/sh\nexec {sys.executable} -c 'import sys; from tests.standin.k8s_standin.entry import main; "
        'sys.exit(main(sys.argv[1:]))\' helm "$@"\n'
    )
    # kubectl: Debian's real client, as on the lab's nodes, with a discovery cache of this cluster's own
    (tools / "kubectl").write_text(
        f'#!/bin/sh\nexec {real_kubectl()} --cache-dir={tmp_path / "kubectl-cache"} "$@"\n'
    )
    for tool in ("helm", "kubectl"):
        (tools / tool).chmod(0o755)
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    path = f"{tools}:{os.environ['PATH']}"
    try:
        yield {"cluster": cluster, "www": www, "url": f"http://127.0.0.1:{srv.server_address[1]}",
               "path": path, "tmp": tmp_path}  # fmt: skip
    finally:
        srv.shutdown()
        cluster.srv.shutdown()


def sh(env: dict, *argv: str) -> subprocess.CompletedProcess[str]:
    """helm or kubectl (argv[0]) against the stand-in cluster."""
    return subprocess.run(
        [argv[0], f"--kubeconfig={env['cluster'].kubeconfig}", *argv[1:]], capture_output=True, text=True,
        env=os.environ | {"PATH": env["path"], "PYTHONPATH": str(REPO)}, check=False, timeout=60,
    )  # fmt: skip


def run_play(
    env: dict, play: list[dict[str, Any]], extra: dict[str, Any], *flags: str
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook PLAY on localhost with EXTRA as an extra-vars file (flags: e.g. --check)."""
    tmp = env["tmp"]
    (tmp / "play.yml").write_text(yaml.safe_dump(play))
    (tmp / "extra.yml").write_text(yaml.safe_dump(extra))
    run_env = os.environ | {
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1", "PATH": env["path"],
        "PYTHONPATH": str(REPO), "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
    }  # fmt: skip
    return subprocess.run(
        [PLAYBOOK, "-i", "localhost,", str(tmp / "play.yml"), "-e", f"@{tmp / 'extra.yml'}", *flags],
        capture_output=True, text=True, env=run_env, timeout=300, check=False,
    )  # fmt: skip


def localhost_changed(out: str) -> int:
    """changed= of localhost's line in ansible-playbook's PLAY RECAP (OUT: its stdout)."""
    line = next(ln for ln in out.splitlines() if ln.startswith("localhost") and "changed=" in ln)
    return int(line.split("changed=")[1].split()[0])
