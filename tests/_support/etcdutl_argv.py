"""etcd_restore's etcdutl command lines as the role renders them (roles/etcd_restore/tasks/etcdutl.yml),
by Ansible on localhost: {"status": argv, "restore": argv}, for the given runtime and paths."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests._support.standin_localhost import run_play

NAME = "20261130T000000Z"


def etcdutl_argv(tmp: Path, runtime: str, image: str, snapshot: str, data_dir: str) -> dict[str, list[str]]:
    out = tmp / f"argv-{runtime}.json"
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": [
        {"ansible.builtin.include_role": {"name": "etcd_restore", "tasks_from": "etcdutl.yml"}},
        {"ansible.builtin.copy": {"dest": str(out), "mode": "0600", "content":
            "{{ {'status': etcd_restore_etcdutl_status, 'restore': etcd_restore_etcdutl_restore} | to_json }}"}},
    ]}]  # fmt: skip
    extra = {"appliance_container_runtime": runtime, "appliance_paths_backups": "/var/lib/appliance/backups",
             "appliance_paths_restore_state": "/var/lib/appliance/restore.json",
             "appliance_paths_admin_conf": "/etc/kubernetes/admin.conf", "etcd_restore_name": NAME,
             "etcd_restore_image": image, "etcd_restore_snapshot": snapshot, "etcd_restore_data_dir": data_dir}  # fmt: skip
    run = run_play({"tmp": tmp, "path": os.environ["PATH"]}, play, extra)
    assert run.returncode == 0, run.stdout[-3000:]
    return json.loads(out.read_text())
