#!/usr/bin/env python3
"""Molecule's delegated driver on the rehearsal lab, shared by every role's `molecule/lab`.

    lab.py up [--nodes N] [--installed]
                            create: build (incremental) + sign + verify the lab bundle, `appliance lab up`;
                            --installed: then the whole install, from its snapshot when there is one
    lab.py down             destroy: `appliance lab down --purge`
    lab.py --list           dynamic inventory: the lab's own site, rendered exactly as
                            `appliance install --site lab` renders it (hosts.yml + group_vars),
                            plus the manifest digest the bundle gate verified at `up`

The lab is named by APPLIANCE_LAB_NAME (as for `appliance lab`); the bundle and its signing key
live under APPLIANCE_MOLECULE_BUNDLES (default /var/lib/appliance/molecule).
Run with the toolkit's venv on PATH (the Makefile does that).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

# Its own directory: a `make demo` or e2e building the demo's bundle at the same time would
# otherwise leave its .staging in the bundle this run verifies.
BUNDLES = Path(os.environ.get("APPLIANCE_MOLECULE_BUNDLES") or "/var/lib/appliance/molecule")
GATE_FILE = "molecule-gate.json"  # in the lab's site directory: what `up` verified


def appliance(*args: str) -> None:
    """The real `appliance` command, as a user runs it; its output goes to molecule's log."""
    print("+ appliance " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "appliance_cli", *args], check=True)


def up(nodes: int) -> None:
    from appliance_cli.core import bundlegate
    from appliance_cli.core.siteconfig import load_site
    from appliance_cli.lab.layout import LabLayout

    # Under Mitogen the create task runs in a worker pinned to one CPU, and every lab node would
    # inherit that (kubeadm's NumCPU preflight then fails): give the lab the whole machine.
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    bundle, key = BUNDLES / "lab", BUNDLES / "lab-signing"
    BUNDLES.mkdir(parents=True, exist_ok=True)
    appliance("bundle", "build", "--profile", "lab", "--out", str(bundle))
    if not Path(f"{key}.key").exists():
        appliance("bundle", "keygen", "--out", str(key))
    appliance("bundle", "sign", str(bundle), "--key", f"{key}.key")
    appliance("lab", "up", "--nodes", str(nodes), "--bundle", str(bundle), "--bundle-key", f"{key}.pub")
    # The install gate, as `appliance install` runs it: the copy step on master1 then refuses
    # any manifest but the one verified here.
    site_dir = LabLayout.default().site_dir
    gate = bundlegate.check(load_site(site_dir))
    print(gate.summary, flush=True)
    (site_dir / GATE_FILE).write_text(json.dumps(gate.extravars) + "\n")


def installed(nodes: int) -> None:
    """The lab, up, as `appliance install --skip-diagnose` leaves it: restored from the snapshot
    of this configuration (tests/_support/labsnap.py names it) when there is one, else installed
    and saved. For the roles that act on an installed cluster (backup, restore, upgrade)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests._support
    from appliance_cli.debian.rootfs import BASE_NAME
    from appliance_cli.lab import snapshot
    from appliance_cli.lab.layout import LabLayout
    from tests._support import labsnap

    layout = LabLayout.default()
    bundle, pub = BUNDLES / "lab", Path(f"{BUNDLES / 'lab-signing'}.pub")
    args = ("--skip-diagnose",)
    key = labsnap.key(
        lab=layout.name, nodes=nodes, site_text=(layout.site_dir / "appliance.yml").read_text(), bundle=bundle,
        public_key=pub, args=args, base_image=layout.cache_dir / BASE_NAME,
    )  # fmt: skip
    if snapshot.exists(layout, layout.name, key):
        snapshot.restore(layout.name, key, bundle_key=pub, progress=print)
        return
    for old in snapshot.others(layout, layout.name, key):
        print(f"snapshot {old.name} is stale (its inputs changed): removed", flush=True)
        snapshot.remove(old)
    appliance("install", "--site", str(layout.site_dir), *args)
    snapshot.save(layout.name, key, {}, bundle_key=pub, progress=print)


def down() -> None:
    appliance("lab", "down", "--purge")


def _walk(name: str, node: dict[str, Any] | None, out: dict[str, Any]) -> None:
    """One group of a YAML inventory into the script-inventory JSON form."""
    node = node or {}
    group = out.setdefault(name, {"hosts": [], "vars": {}, "children": []})
    for host, hostvars in (node.get("hosts") or {}).items():
        group["hosts"].append(host)
        out["_meta"]["hostvars"].setdefault(host, {}).update(hostvars or {})
    group["vars"].update(node.get("vars") or {})
    for child, child_node in (node.get("children") or {}).items():
        group["children"].append(child)
        _walk(child, child_node, out)


def inventory() -> dict[str, Any]:
    """The running lab's inventory; empty while no lab is up (create and destroy run on localhost)."""
    from appliance_cli.core.inventory import render_inventory
    from appliance_cli.core.siteconfig import load_site
    from appliance_cli.lab.layout import LabLayout

    out: dict[str, Any] = {"_meta": {"hostvars": {}}}
    site_dir = LabLayout.default().site_dir
    if not (site_dir / "appliance.yml").is_file():
        return out
    rendered = render_inventory(load_site(site_dir))
    _walk("all", yaml.safe_load(rendered.hosts_file.read_text()).get("all"), out)
    out["all"]["vars"].update(yaml.safe_load(rendered.group_vars_file.read_text()) or {})
    gate = site_dir / GATE_FILE
    if gate.is_file():
        out["all"]["vars"].update(json.loads(gate.read_text()))
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--list"]:
        json.dump(inventory(), sys.stdout)
    elif argv[:1] == ["--host"]:
        json.dump({}, sys.stdout)  # every host's vars are in --list's _meta
    elif argv[:1] == ["up"]:
        nodes = int(argv[2]) if argv[1:2] == ["--nodes"] else 2
        up(nodes)
        if "--installed" in argv:
            installed(nodes)
    elif argv[:1] == ["down"]:
        down()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
