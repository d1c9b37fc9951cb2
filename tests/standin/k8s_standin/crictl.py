"""crictl."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import subprocess
import sys
from typing import Any

import yaml

from . import runtime
from .containerd import containerd_version, cri_info, crictl_fatal, ctr, image_exists, pull_image, sock_path
from .etcdpod import ETCD_CONTAINER
from .flags import parse_flags
from .util import APISERVER_UNIT, CRICTL_VERSION, Fail, hp, read_text, run, systemctl, tabwrite

# --------------------------------------------------------------------------- crictl


def _crictl_images(ep: str, flags: dict[str, Any]) -> None:
    _, out = ctr(ep, "-n", "k8s.io", "images", "ls")
    if flags.get("output") == "json":
        print(json.dumps({"images": _image_records(out)}, indent=2))
        return
    rows = [["IMAGE", "TAG", "IMAGE ID", "SIZE"]]
    for line in out.splitlines()[1:]:
        f = line.split()
        if len(f) < 5 or f[0].startswith("sha256:") or "@" in f[0]:
            continue
        repo, _, tag = f[0].rpartition(":")
        if "/" in tag:
            repo, tag = f[0], "<none>"
        rows.append([repo, tag, f[2].split(":")[-1][:13], f[3] + f[4].replace("i", "").replace("B", "B")])
    if flags.get("quiet"):
        print("\n".join(r[0] + ":" + r[1] for r in rows[1:]))
    else:
        sys.stdout.write(tabwrite(rows))


_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def _image_records(ctr_ls: str) -> list[dict[str, Any]]:
    """`crictl images -o json`'s records from `ctr images ls` (one line per ref, grouped here by the
    target digest), as cri-tools v1.23.0 prints a ListImagesResponse (cmd/crictl/image.go: jsonpb
    with EmitDefaults; fields of v1alpha2 api.proto's `message Image`, uint64 size as a string)."""
    by_target: dict[str, dict[str, Any]] = {}
    for line in ctr_ls.splitlines()[1:]:
        f = line.split()
        if len(f) < 5:
            continue
        rec = by_target.setdefault(f[2], {"id": f[2], "repoTags": [], "repoDigests": [], "size": "0",
                                          "uid": None, "username": "", "spec": None})  # fmt: skip
        if f[0].startswith("sha256:"):
            rec["id"] = f[0]
        else:
            rec["repoDigests" if "@" in f[0] else "repoTags"].append(f[0])
        rec["size"] = str(int(float(f[3]) * _UNITS.get(f[4], 1)))
    return sorted(by_target.values(), key=lambda r: (r["repoTags"] or [""])[0])


# The stand-in API server is a systemd unit, not a container: each start of the unit is one
# container, its ID the start's InvocationID, and `crictl logs ID` reads what that start's process
# wrote to the journal. As the kubelet keeps the last dead container of a pod's container
# (--maximum-dead-containers-per-container, default 1: cmd/kubelet/app/options/options.go; the GC in
# pkg/kubelet/kuberuntime/kuberuntime_gc.go), `ps -a` lists the current start and the one before
# it, newest first as crictl sorts them (containerByCreated, cmd/crictl/container.go).

# etcd's static pod runs in containerd for real (etcdpod.py): its task is listed with ctr's, named
# `etcd`, and `crictl exec ETCD CMD...` is a `ctr task exec` in it (the image's etcdctl is real).


def _apiserver_starts(earlier_too: bool = True) -> tuple[str, str]:
    """The unit's current InvocationID and the last earlier one whose process wrote to the journal
    (either "" when there is none)."""
    _, current = systemctl("show", "-p", "InvocationID", "--value", APISERVER_UNIT)
    current = current.strip()
    if not earlier_too:
        return current, ""
    rc, out = run(["journalctl", "--no-pager", "-o", "json", "--output-fields=_SYSTEMD_INVOCATION_ID",
                   "-n", "500", f"_SYSTEMD_UNIT={APISERVER_UNIT}"], timeout=30)  # fmt: skip
    earlier = ""
    for line in out.splitlines() if rc == 0 else []:
        with contextlib.suppress(ValueError, AttributeError):
            inv = json.loads(line).get("_SYSTEMD_INVOCATION_ID", "")
            if re.fullmatch(r"[0-9a-f]{32}", inv) and inv != current:
                earlier = inv
    return current, earlier


def _apiserver_rows(all_states: bool) -> list[list[str]]:
    if not os.path.exists(hp(f"/etc/systemd/system/{APISERVER_UNIT}")):
        return []
    running = systemctl("is-active", "--quiet", APISERVER_UNIT)[0] == 0
    if not (running or all_states):
        return []
    state = "Running" if running else "Exited"
    current, earlier = _apiserver_starts(earlier_too=all_states)
    rows = [[current, "", "", state, "kube-apiserver", "1" if earlier else "0", ""]] if current else []
    if earlier:  # asked for with -a only
        rows.append([earlier, "", "", "Exited", "kube-apiserver", "0", ""])
    return rows


def _crictl_exec(ep: str, args: list[str]) -> int:
    """crictl exec [-i] [-t] [-s] [--timeout N] CONTAINER CMD...: in the etcd container or a pod's."""
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag == "--timeout" and args:
            args.pop(0)
        elif flag not in (
            "-i",
            "-t",
            "-it",
            "-ti",
            "-s",
            "--sync",
            "--interactive",
            "--tty",
        ) and not flag.startswith("--timeout="):
            sys.stderr.write(crictl_fatal(f"flag provided but not defined: {flag}"))
            return 1
    if len(args) < 2:
        sys.stderr.write(crictl_fatal("ID and COMMAND cannot be empty"))
        return 1
    cid, cmd = args[0], args[1:]
    running = [c for c, state in (runtime.tasks(ep) or {}).items() if state == "RUNNING"]
    known = {e["id"] for u in runtime.recorded_uids() for e in runtime.record(u) if e["kind"] == "container"}
    found = [c for c in running if c.startswith(cid) and (c in known or c == ETCD_CONTAINER)]
    if len(found) != 1:  # a prefix as containerd's CRI resolves one (truncindex): unique, or not found
        sys.stderr.write(crictl_fatal(f"execing command in container: rpc error: code = NotFound desc = an error "
                                      f'occurred when try to find container "{cid}": not found'))  # fmt: skip
        return 1
    # what crictl passes through: the command's own output and exit code (runc's when it cannot exec)
    argv = ["ctr", "--address", sock_path(ep), "-n", runtime.NS, "tasks", "exec", "--exec-id",
            f"crictl-exec-{os.getpid()}", found[0], *cmd]  # fmt: skip
    return subprocess.run(argv, check=False).returncode


def _pod_records() -> list[tuple[dict, dict]]:
    """(its pod's sandbox entry, an entry) for every container runtime.py ran, sandboxes included."""
    out = []
    for uid in sorted(runtime.recorded_uids()):
        entries = runtime.record(uid)
        if entries and entries[0]["kind"] == "sandbox":
            out += [(entries[0], e) for e in entries]
    return out


def _crictl_ps(ep: str, flags: dict[str, Any]) -> None:
    have = runtime.tasks(ep) or {}
    rows = [["CONTAINER", "IMAGE", "CREATED", "STATE", "NAME", "ATTEMPT", "POD ID"]]
    mine = {e["id"]: (sb, e) for sb, e in _pod_records()}
    other = {"name": "", "image": "", "kind": "container"}  # etcd's, or a task no pod of this kubelet's
    for cid, state in have.items():
        sb, e = mine.get(cid, ({"id": ""}, other))
        if e["kind"] == "sandbox":  # `crictl pods` lists these
            continue
        name = e["name"] or ("etcd" if cid == ETCD_CONTAINER else cid[:13])
        if flags.get("all") or state == "RUNNING":
            rows.append(
                [cid, e["image"], "", "Running" if state == "RUNNING" else "Exited", name, "0", sb["id"]]
            )
    rows += _apiserver_rows(bool(flags.get("all")))
    if flags.get("name"):  # a regular expression on NAME, as crictl filters
        rows[1:] = [r for r in rows[1:] if re.search(flags["name"], r[4])]
    if flags.get("pod"):  # a pod sandbox's id, or a prefix of it
        rows[1:] = [r for r in rows[1:] if r[6] and r[6].startswith(flags["pod"])]
    # -q prints whole IDs, the table their first 13 characters (cmd/crictl/container.go, truncatedID)
    sys.stdout.write(
        "\n".join(r[0] for r in rows[1:]) + ("\n" if rows[1:] else "")
        if flags.get("quiet")
        else tabwrite([rows[0], *([r[0][:13], *r[1:6], r[6][:13]] for r in rows[1:])])
    )


def _crictl_pods(ep: str, flags: dict[str, Any]) -> None:
    """`crictl pods`: the sandboxes runtime.py ran (Ready while the pause container runs)."""
    have = runtime.tasks(ep) or {}
    rows = [["POD ID", "CREATED", "STATE", "NAME", "NAMESPACE", "ATTEMPT", "RUNTIME"]]
    for sb, e in _pod_records():
        if e is sb:
            state = "Ready" if have.get(sb["id"]) == "RUNNING" else "NotReady"
            rows.append([sb["id"], "", state, sb.get("pod", ""), sb.get("namespace", ""), "0", "(default)"])
    if flags.get("name"):  # a regular expression on the pod's name
        rows[1:] = [r for r in rows[1:] if re.search(flags["name"], r[3])]
    sys.stdout.write(
        "\n".join(r[0] for r in rows[1:]) + ("\n" if rows[1:] else "")
        if flags.get("quiet")
        else tabwrite([rows[0], *([r[0][:13], *r[1:]] for r in rows[1:])])
    )


def _crictl_logs(container: str, flags: dict[str, Any]) -> int:
    starts = [c for c in _apiserver_starts() if c] if len(container) >= 4 else []
    match = [c for c in starts if c.startswith(container)]
    if not match:
        sys.stderr.write(
            crictl_fatal(f"standin: crictl logs of {container} is not supported (only the API server's)")
        )
        return 1
    tail = str(flags.get("tail") or "-1")
    argv = ["journalctl", "--no-pager", "-o", "cat", f"_SYSTEMD_INVOCATION_ID={match[0]}"]
    _, text = run(argv + ([] if tail == "-1" else ["-n", tail]), timeout=30)
    sys.stderr.write(text)  # klog writes to stderr; crictl logs passes the streams through
    return 0


def crictl_main(argv: list[str]) -> int:
    exec_args: list[str] = []
    if "exec" in argv:  # what follows is exec's: its flags, the container, the command and its flags
        i = argv.index("exec")
        argv, exec_args = argv[: i + 1], argv[i + 1 :]
    try:
        flags, pos = parse_flags(argv, {"runtime-endpoint": "str", "image-endpoint": "str", "timeout": "str",
                                        "debug": "bool", "config": "str", "version": "bool", "all": "bool",
                                        "quiet": "bool", "output": "str", "verbose": "bool", "name": "str",
                                        "tail": "str", "pod": "str"},
                                 {"r": "runtime-endpoint", "i": "image-endpoint", "t": "timeout", "D": "debug",
                                  "c": "config", "v": "version", "a": "all", "q": "quiet", "o": "output"})  # fmt: skip
    except Fail as e:
        sys.stderr.write(crictl_fatal(e.message))
        return 1
    if flags.get("version") and not pos:
        print(f"crictl version {CRICTL_VERSION}")
        return 0
    ep = flags.get("runtime-endpoint")
    if not ep:
        cfg = yaml.safe_load(read_text(flags.get("config", "/etc/crictl.yaml")) or "") or {}
        ep = cfg.get("runtime-endpoint") if isinstance(cfg, dict) else None
    if not ep:
        defaults = ["unix:///var/run/dockershim.sock", "unix:///run/containerd/containerd.sock",
                    "unix:///run/crio/crio.sock", "unix:///var/run/cri-dockerd.sock"]  # fmt: skip
        sys.stderr.write(f'time="{dt.datetime.now().astimezone().isoformat(timespec="seconds")}" level=warning '
                         f'msg="runtime connect using default endpoints: {defaults}. As the default settings are now '
                         'deprecated, you should set the endpoint instead."\n')  # fmt: skip
        ep = next((d for d in defaults if os.path.exists(sock_path(d))), defaults[0])
    sub = pos[0] if pos else ""
    rc, ver = ctr(ep, "version", timeout=10)
    if rc != 0 or "Server:" not in ver:
        what = {"info": "getting status of runtime", "version": "getting the runtime version"}.get(
            sub, "connect"
        )
        sys.stderr.write(crictl_fatal(f"{what}: connect: connect endpoint '{ep}', make sure you are running as root "
                                      "and the endpoint has been started: context deadline exceeded"))  # fmt: skip
        return 1
    if sub == "info":
        print(json.dumps(cri_info(ep, ver), indent=2))
    elif sub == "version":
        print(
            f"Version:  0.1.0\nRuntimeName:  containerd\nRuntimeVersion:  {containerd_version(ver)}\nRuntimeApiVersion:  v1alpha2"
        )
    elif sub == "images":
        _crictl_images(ep, flags)
    elif sub == "ps":
        _crictl_ps(ep, flags)
    elif sub == "pods":
        _crictl_pods(ep, flags)
    elif sub == "exec":
        return _crictl_exec(ep, exec_args)
    elif sub == "logs" and len(pos) > 1:
        return _crictl_logs(pos[1], flags)
    elif sub == "pull" and len(pos) > 1:
        rc, out = pull_image(ep, pos[1])
        (sys.stderr if rc else sys.stdout).write(out)
        return rc
    elif sub == "inspecti" and len(pos) > 1:
        if not image_exists(ep, pos[1]):
            sys.stderr.write(crictl_fatal(f'no such image "{pos[1]}" present'))
            return 1
        print(json.dumps({"status": {"repoTags": [pos[1]]}}, indent=2))
    else:
        sys.stderr.write(crictl_fatal(f"standin: crictl {sub} is not supported"))
        return 1
    return 0
