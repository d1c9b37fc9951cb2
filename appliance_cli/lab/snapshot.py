"""Snapshots of a whole lab: every node's root filesystem and the lab's site directory.

`save` stops the nodes (a clean poweroff, so every file on disk is consistent), copies them and the
site directory under a temporary name in the snapshot store, renames that into place (a snapshot
killed half-way is never found under its final name), and boots the lab again. `restore` purges the
lab, copies a snapshot back and boots it: the nodes come up as they were when it was saved, with
their host keys, the lab key and every file the install left on the controller's side.

The host's filesystem has no reflinks (ext4) and the nodes' containerd keeps an overlayfs
snapshotter on their root, which an overlay root cannot hold (the kernel refuses overlayfs as an
upper dir): so a snapshot is a plain copy (`cp -a`, node by node in parallel), not an overlay.
A lab whose nodes' trees were last made from the same snapshot (a restore, or the save itself:
RESTORED marks it) gets back only what changed since (treesync.py); any other, a whole copy.
A snapshot has a name of its own (by default its lab's), so labs of several names can start from
one: restored into another lab, the site's ssh proxy command is pointed at that lab's namespace
(the ssh files are written anew by `lab up`; the install renders its inventory anew each run).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from appliance_cli.errors import LabError
from appliance_cli.fsutil import atomic_write
from appliance_cli.lab import lifecycle, proc, sitegen, treesync
from appliance_cli.lab.layout import LabLayout
from appliance_cli.lab.node import marker
from appliance_cli.lab.state import LabState
from appliance_cli.proc import run

META = "snapshot.json"
_TMP = ".tmp-"
# In the lab's nodes directory: the snapshot (its path and nonce) the nodes' trees were last made
# from, written right after that copy ended; its ctime is when. Removed before a restore changes
# anything, so an interrupted one leaves none (and the next restore copies whole).
RESTORED = ".restored.json"
Progress = Callable[[str], None]


def store(layout: LabLayout) -> Path:
    """Where this machine keeps lab snapshots (beside the base image, in the lab cache)."""
    return layout.cache_dir / "lab-snapshots"


def path(layout: LabLayout, name: str, key: str) -> Path:
    return store(layout) / f"{name}-{key}"


def exists(layout: LabLayout, name: str, key: str) -> bool:
    return (path(layout, name, key) / META).is_file()


def meta(layout: LabLayout, name: str, key: str) -> dict[str, Any]:
    return json.loads((path(layout, name, key) / META).read_text())


def _copy_tree(src: Path, dst: Path, what: str, log: Path) -> None:
    run([*treesync.CP_A, "--", str(src), str(dst)], what=what, log=log, error=LabError)


def _copy_lab(src_nodes: Path, dst_nodes: Path, names: list[str], log: Path) -> None:
    dst_nodes.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        list(
            pool.map(
                lambda n: _copy_tree(src_nodes / n, dst_nodes / n, f"copying {n}'s root filesystem", log),
                names,
            )
        )


def _bundle_args(state: LabState) -> dict[str, Any]:
    return {"bundle": Path(state.bundle)} if state.bundle else {}


def save(
    name: str,
    key: str,
    extra: dict[str, Any],
    bundle_key: Path | None = None,
    progress: Progress | None = None,
    boot: bool = True,
) -> Path:
    """Snapshot the running lab under `key` (with `extra`, JSON, kept in its metadata) and bring
    the lab back up as it was (boot=False: left down, for a caller that tears it down next).
    Returns the snapshot's directory."""
    say = progress or (lambda _: None)
    layout = LabLayout.default()
    state = LabState.load(layout.state_file)
    if state is None:
        raise LabError(f"lab '{layout.name}' is not up", hint="nothing to snapshot")
    names = [n.name for n in state.nodes]
    missing = [n for n in names if not marker(layout, n).is_file()]
    if missing:
        raise LabError(f"{missing[0]}: its root filesystem is incomplete", hint="recreate the lab")
    final = path(layout, name, key)
    store(layout).mkdir(parents=True, exist_ok=True)
    _remove_abandoned(store(layout))
    tmp = final.with_name(f".{final.name}{_TMP}{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    log = layout.logs_dir / "snapshot.log"
    t0 = time.monotonic()
    nonce = secrets.token_hex(8)  # this copy, not another saved under the same name later
    site_text = _site_file(layout).read_text()
    _copy_tree(layout.site_dir, tmp / "site", "copying the lab's site directory", log)
    lifecycle.down()
    (layout.nodes_dir / RESTORED).unlink(missing_ok=True)
    try:
        _copy_lab(layout.nodes_dir, tmp / "nodes", names, log)
        _mark(layout, final, nonce, names)  # the nodes' trees are this snapshot's now
    finally:
        if boot:
            _up_again(layout, state, bundle_key, site_text)
    (tmp / META).write_text(
        json.dumps({"key": key, "lab": layout.name, "nodes": names, "bundle": state.bundle, "extra": extra,
                    "nonce": nonce}) + "\n"
    )  # fmt: skip
    run(["sync", "-f", str(tmp / META)], what="flushing the snapshot", log=log, error=LabError)
    shutil.rmtree(final, ignore_errors=True)  # an older copy of the same key (a forced rebuild)
    tmp.rename(final)
    say(f"lab '{layout.name}' saved as snapshot {final.name} ({time.monotonic() - t0:.1f}s)")
    return final


def others(layout: LabLayout, name: str, key: str) -> list[Path]:
    """Snapshots of this name under other keys: made from inputs that have changed since."""
    return sorted(
        p
        for p in store(layout).glob(f"{name}-*")
        if p.name != path(layout, name, key).name and p.name[len(name) + 1 :].isalnum()
    )


def remove(snap: Path) -> None:
    shutil.rmtree(snap, ignore_errors=True)


def restore(
    name: str, key: str, bundle_key: Path | None = None, progress: Progress | None = None
) -> lifecycle.LabInfo:
    """Replace the lab (whatever is left of it is purged) by the snapshot `key`, booted."""
    say = progress or (lambda _: None)
    layout = LabLayout.default()
    src = path(layout, name, key)
    if not exists(layout, name, key):
        raise LabError(f"no snapshot {src.name} of lab '{layout.name}'", hint=f"look in {store(layout)}")
    info = meta(layout, name, key)
    names: list[str] = info["nodes"]
    t0 = time.monotonic()
    lifecycle.down()
    since = _marked_since(layout, src, info)
    (layout.nodes_dir / RESTORED).unlink(missing_ok=True)  # before anything changes
    for d in (
        (layout.site_dir, layout.run_dir)
        if since is not None
        else (layout.site_dir, layout.run_dir, layout.nodes_dir)
    ):
        shutil.rmtree(d, ignore_errors=True)  # as `lab down --purge`, the nodes' trees kept when they sync
    for d in (layout.logs_dir, layout.nodes_dir):
        d.mkdir(parents=True, exist_ok=True)
    log = layout.logs_dir / "snapshot.log"
    _copy_tree(src / "site", layout.site_dir, "copying the snapshot's site directory", log)
    if since is None:
        _copy_lab(src / "nodes", layout.nodes_dir, names, log)
        how = "copied whole"
    else:
        replaced = _sync_lab(src / "nodes", layout, names, since, log)
        how = f"{replaced} changed entries put back"
    for n in names:  # complete: `lab up` boots them as they are
        marker(layout, n).write_text("")
    if info.get("nonce"):  # a snapshot saved before nonces were kept is copied whole each time
        _mark(layout, src, info["nonce"], names)
    state = LabState(name=layout.name, count=len(names), nodes=[], bundle=info["bundle"])
    up = _up_again(layout, state, bundle_key, retarget(_site_file(layout).read_text(), info["lab"], layout))
    say(f"lab '{layout.name}' restored from snapshot {src.name}, {how} ({time.monotonic() - t0:.1f}s)")
    return up


def _mark(layout: LabLayout, snap: Path, nonce: str, names: list[str]) -> None:
    """The nodes' trees are snapshot `snap`'s (instance `nonce`), as of now (the file's ctime)."""
    atomic_write(
        layout.nodes_dir / RESTORED,
        json.dumps({"snapshot": str(snap), "nonce": nonce, "nodes": names}) + "\n",
    )


def _marked_since(layout: LabLayout, snap: Path, info: dict[str, Any]) -> int | None:
    """When the nodes' trees were last made this snapshot's (ns, the kernel's clock), or None when
    they were not, or it cannot be told: then they are copied whole."""
    mark = layout.nodes_dir / RESTORED
    try:
        data = json.loads(mark.read_text())
        since = mark.stat().st_ctime_ns
    except (OSError, ValueError):
        return None
    want = {"snapshot": str(snap), "nonce": info.get("nonce"), "nodes": info["nodes"]}
    if not info.get("nonce") or data != want:
        return None
    if not all((layout.nodes_dir / n).is_dir() and marker(layout, n).is_file() for n in info["nodes"]):
        return None
    return since


def _sync_lab(src_nodes: Path, layout: LabLayout, names: list[str], since: int, log: Path) -> int:
    """Each node's tree back to the snapshot's by what changed (treesync), in parallel; whatever
    else is in the nodes directory (a node added since) removed. Returns the entries replaced."""
    keep = set(names) | {marker(layout, n).name for n in names}
    for entry in layout.nodes_dir.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        return sum(pool.map(lambda n: _sync_node(src_nodes / n, layout.nodes_dir / n, since, log), names))


def _sync_node(src: Path, dst: Path, since: int, log: Path) -> int:
    """One node's tree back to the snapshot's by what changed; past treesync.MAX_CHANGES entries,
    the whole copy. Returns the entries that changed."""
    p = treesync.plan(src, dst, since)
    changes = len(p.copy) + len(p.remove)
    if changes > treesync.MAX_CHANGES:
        shutil.rmtree(dst)
        _copy_tree(src, dst, f"copying {dst.name}'s root filesystem ({changes} entries changed)", log)
    else:
        treesync.apply(src, dst, p, log)
    return changes


def retarget(site_text: str, taken_in: str, layout: LabLayout) -> str:
    """A site taken in lab `taken_in`, for `layout`'s lab: ssh goes through this lab's namespace."""
    if taken_in == layout.name:
        return site_text
    taken = LabLayout(name=taken_in, dir=layout.dir, cache_dir=layout.cache_dir)
    return site_text.replace(sitegen.proxy_command(taken), sitegen.proxy_command(layout))


def _site_file(layout: LabLayout) -> Path:
    from appliance_cli.core.siteconfig import SITE_FILE

    return layout.site_dir / SITE_FILE


def _up_again(
    layout: LabLayout, state: LabState, bundle_key: Path | None, site_text: str
) -> lifecycle.LabInfo:
    """`lab up` on the existing root filesystems; it writes the lab's own appliance.yml, so the
    one the lab had (edited, installed) is put back."""
    info = lifecycle.up(nodes=state.count, **_bundle_args(state), bundle_key=bundle_key)
    atomic_write(_site_file(layout), site_text)  # as `lab up` writes it
    return info


def _remove_abandoned(root: Path) -> None:
    """Half-written snapshots of runs that were killed (their PID no longer runs) are removed."""
    for d in root.glob(f".*{_TMP}*"):
        pid = d.name.rsplit(_TMP, 1)[-1]
        if not (pid.isdigit() and proc.alive(int(pid))):
            shutil.rmtree(d, ignore_errors=True)
