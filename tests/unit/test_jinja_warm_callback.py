"""playbooks/callback_plugins/appliance_jinja_warm.py: a worker forked after the callback's task
start loads no filter or test plugin file of its own; one forked before it (the caches just
emptied, as a role's plugin directory empties them) loads them all. Run in a child Python, so
that this process's Ansible state stays as it was."""

from __future__ import annotations

import json
import subprocess
import sys

from appliance_cli.content import JINJA_WARM_CALLBACK, callback_plugins_dir, roles_dir
from appliance_cli.runner.adapter import _envvars
from appliance_cli.runner.events import RunRequest

PLUGIN = callback_plugins_dir() / f"{JINJA_WARM_CALLBACK}.py"

# Counts, in a forked child, the plugin files the child loads from source to resolve one filter
# and one test: what an Ansible worker does when it meets its first `| filter` or `is test`.
CHILD = r"""
import importlib.util, json, os, sys
from pathlib import Path
from ansible.plugins import loader as L
L.init_plugin_loader()
for role in sorted(p for p in Path(sys.argv[2]).iterdir() if p.is_dir()):  # as a run has them
    L.add_all_plugin_dirs(str(role))
spec = importlib.util.spec_from_file_location("warm", sys.argv[1])
warm = importlib.util.module_from_spec(spec); spec.loader.exec_module(warm)
loads = []
real = L.PluginLoader._load_module_source
def counting(self, *a, **k):
    loads.append(self.class_name)
    return real(self, *a, **k)
L.PluginLoader._load_module_source = counting

def worker():
    r, w = os.pipe()
    if os.fork() == 0:
        loads.clear()
        L.filter_loader.get("b64decode"); L.test_loader.get("changed")
        os.write(w, json.dumps(loads).encode()); os._exit(0)
    os.close(w); os.wait()
    return json.loads(os.read(r, 1 << 20))

def empty_caches(n):  # a role with a plugin directory of its own, loaded mid-run
    d = Path(os.environ["TMPDIR"]) / f"role{n}" / "filter_plugins"; d.mkdir(parents=True)
    L.add_all_plugin_dirs(str(d.parent))

cb = warm.CallbackModule()
empty_caches(1)
cold = worker()
cb.v2_playbook_on_task_start(None, False)
warmed = worker()
empty_caches(2)
cb.v2_playbook_on_handler_task_start(None)
warmed_handler = worker()
print(json.dumps({"cold": cold, "warm": warmed, "handler": warmed_handler}))
"""


def test_a_worker_forked_after_the_callback_loads_no_plugin_file(tmp_path):
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(PLUGIN), str(roles_dir())],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={"TMPDIR": str(tmp_path), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    # before: the worker compiles every filter file (the roles' own among them) and every test file
    assert got["cold"].count("FilterModule") >= 5 and "TestModule" in got["cold"], got["cold"]
    assert got["warm"] == [] and got["handler"] == [], got


def test_the_runner_enables_it_from_the_directory_it_ships_in(tmp_path):
    env = _envvars(
        RunRequest(
            playbook=tmp_path / "p.yml", inventory=tmp_path / "hosts.yml", private_data_dir=tmp_path / "r"
        )
    )
    assert JINJA_WARM_CALLBACK in env["ANSIBLE_CALLBACKS_ENABLED"].split(",")
    assert PLUGIN.is_file()
    assert env["ANSIBLE_CALLBACK_PLUGINS"].split(":")[0] == str(callback_plugins_dir())
    assert f'CALLBACK_NAME = "{JINJA_WARM_CALLBACK}"' in PLUGIN.read_text()
