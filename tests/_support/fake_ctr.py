"""containerd's `ctr`, as the stand-in kubelet's runtime.py calls it, for unit tests on a machine
with no containerd daemon: containers and tasks in memory, with ctr's outputs and runc's error for a
program the image lacks (the lab e2e runs the real containerd and runc). `execute` runs a
container's program where a test models it (busybox_cp: busybox's `cp` through the container's bind
mounts), its task then stopped with the exit code it returns."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

VALUE_FLAGS = {"--log-uri", "--with-ns", "--label", "--env", "--mount", "--cwd"}


@dataclass
class Container:
    image: str
    argv: list[str]
    labels: dict[str, str]
    flags: list[str]
    task: str | None = "RUNNING"  # RUNNING, STOPPED, or None (no task)
    exit: int = 0


@dataclass
class FakeCtr:
    programs: dict[str, set[str]] = field(default_factory=dict)  # image -> the programs it has
    entrypoint: list[str] = field(default_factory=lambda: ["/bin/sh", "-c", "sleep"])
    fail_run: str = ""  # an error every `run` returns, as ctr prints it
    execute: Callable[[Container], int | None] | None = None  # an exit code: the program ran and ended
    containers: dict[str, Container] = field(default_factory=dict)
    calls: list[list[str]] = field(default_factory=list)

    def __call__(self, endpoint: str, *args: str, timeout: float = 30) -> tuple[int, str]:
        a = list(args)
        if a[:2] == ["-n", "k8s.io"]:
            a = a[2:]
        self.calls.append(a)
        if a[:1] == ["run"]:
            return self._run(a[1:])
        if a[:2] == ["tasks", "ls"]:
            rows = [
                f"{cid}    {100 + i}    {c.task}"
                for i, (cid, c) in enumerate(self.containers.items())
                if c.task
            ]
            return 0, "TASK    PID    STATUS\n" + "".join(r + "\n" for r in rows)
        if a[:2] == ["tasks", "kill"]:
            c = self.containers.get(a[-1])
            if not c or c.task != "RUNNING":
                return 1, f"ctr: no running task found: task {a[-1]} not found: not found\n"
            c.task, c.exit = "STOPPED", 137 if "SIGKILL" in a else 143
            return 0, ""
        if a[:2] == ["tasks", "delete"]:
            c = self.containers.get(a[-1])
            if not c or not c.task or (c.task == "RUNNING" and "-f" not in a):
                return 1, f"ctr: task {a[-1]}: not found\n"
            c.task = None
            warn = (
                f'level=warning msg="task {a[-1]} exit with non-zero exit code {c.exit}"\n' if c.exit else ""
            )
            return 0, warn
        if a[:2] == ["containers", "rm"]:
            if self.containers.pop(a[-1], None) is None:
                return 1, f'ctr: container "{a[-1]}" in namespace "k8s.io": not found\n'
            return 0, ""
        return 1, f"fake ctr: {a} is not modelled\n"

    def _run(self, a: list[str]) -> tuple[int, str]:
        flags, i = [], 0
        while i < len(a) and a[i].startswith("-"):
            flags += a[i : i + (2 if a[i] in VALUE_FLAGS else 1)]
            i += 2 if a[i] in VALUE_FLAGS else 1
        image, cid, argv = a[i], a[i + 1], a[i + 2 :]
        if cid in self.containers:
            return 1, f'ctr: container "{cid}": already exists\n'
        labels = dict(flags[j + 1].split("=", 1) for j in range(len(flags)) if flags[j] == "--label")
        self.containers[cid] = Container(image, argv or self.entrypoint, labels, flags)
        if self.fail_run:
            self.containers[cid].task = None
            return 1, f"ctr: {self.fail_run}\n"
        program = (argv or self.entrypoint)[0]
        if image in self.programs and program not in self.programs[image]:
            self.containers[cid].task = None
            return 1, ("ctr: failed to create shim task: OCI runtime create failed: runc create failed: unable to "
                       f'start container process: exec: "{program}": stat {program}: no such file or directory: '
                       "unknown\n")  # fmt: skip
        code = self.execute(self.containers[cid]) if self.execute else None
        if code is not None:
            self.containers[cid].task, self.containers[cid].exit = "STOPPED", code
        return 0, ""

    def exit(self, name: str, code: int) -> None:
        """The task of the app container NAME ends with CODE."""
        for c in self.containers.values():
            if c.labels.get("io.kubernetes.container.name") == name and c.task == "RUNNING":
                c.task, c.exit = "STOPPED", code
                return
        raise KeyError(name)

    def running(self, kind: str) -> list[Container]:
        return [c for c in self.containers.values()
                if c.labels.get("io.cri-containerd.kind") == kind and c.task == "RUNNING"]  # fmt: skip


def busybox_cp(root: str) -> Callable[[Container], int | None]:
    """busybox's `cp [-f] SRC DST` in a container whose paths are its bind mounts (`--mount
    type=bind,src=NODE,dst=PATH,...`), the node's files under ROOT: 0 once copied, 1 as busybox
    fails (`cp: can't stat 'SRC': No such file or directory`); None for any other program."""

    def run(c: Container) -> int | None:
        if c.argv[:1] != ["cp"]:
            return None
        binds = [dict(kv.split("=", 1) for kv in c.flags[i + 1].split(","))
                 for i in range(len(c.flags)) if c.flags[i] == "--mount"]  # fmt: skip

        def node_path(path: str) -> str | None:
            for b in sorted(binds, key=lambda b: -len(b["dst"].rstrip("/"))):
                base = b["dst"].rstrip("/")
                if path == base or path.startswith(base + "/"):
                    return root + b["src"] + path[len(base) :]
            return None

        src, dst = (node_path(p) for p in [a for a in c.argv[1:] if not a.startswith("-")])
        if src is None or dst is None or not os.path.isfile(src):
            return 1
        shutil.copyfile(src, dst)
        return 0

    return run
