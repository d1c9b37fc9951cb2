"""NFS throughput for `appliance diagnose`, sent to a node on ssh's standard input (Python 3.8+,
standard library only) and run as root there:
  python3 - SERVER PATH NODE MB SECONDS
Writes MB megabytes to the site's export with the userspace client (libnfs-utils' nfs-cp, as root:
uid 0 in the URL), reads them back (nfs-cat), twice (the best of each), and removes them: nfs_write_mbps, nfs_read_mbps and
nfs_bytes as key=value lines; nfs_skip=WHY (no client yet), nfs_write_error=WHY or
nfs_read_error=WHY, and nfs_cleanup_error=WHY if the file could not be removed.

Nothing stays on the export: the file is DIR/NODE (DIR, a hidden directory in the export's top
directory, made if missing), and a `finally` removes it and then DIR (when empty: another node's
run may be using it) through libnfs itself (ctypes; Debian's libnfs-utils has no nfs-rm), whether
the write and the read worked or not, timed out or not. Each NFS call is a child process with a
time limit (SECONDS for a transfer, OP_SECONDS for the others): a filer that stops answering costs
a bounded time, never a hung diagnose. The source is a sparse scratch file (no disk read in the
write's time) removed at the end; the read goes to a pipe, counted, never to disk. Each rate is
what one client call achieves, its mount included, and the read follows the write at once (the
filer's cache is part of what a node sees then)."""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time

DIR = ".appliance-diagnose"
OP_SECONDS = 15
ROUNDS = 2  # each transfer, best of
CHUNK = 1 << 20
NFS_ERROR = re.compile(r"\b(NFS\d?ERR|MNT\d?ERR)_[A-Z_]+(\(-?\d+\))?")
ENOENT, EEXIST, EROFS, ENOTEMPTY = 2, 17, 30, 39
# One libnfs call in a child process (so that it can be timed out): prints "STAGE RC MESSAGE",
# STAGE being mount or the call, RC libnfs' return (a negative errno on failure).
OP = r"""
import ctypes, ctypes.util, sys
op, server, path, name = sys.argv[1:5]
lib = ctypes.CDLL(ctypes.util.find_library("nfs") or "libnfs.so.13")
lib.nfs_init_context.restype = ctypes.c_void_p
lib.nfs_get_error.restype = ctypes.c_char_p
lib.nfs_get_error.argtypes = [ctypes.c_void_p]
lib.nfs_set_uid.argtypes = lib.nfs_set_gid.argtypes = [ctypes.c_void_p, ctypes.c_int]
lib.nfs_mount.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
call = getattr(lib, "nfs_" + op)
call.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
ctx = lib.nfs_init_context()
lib.nfs_set_uid(ctx, 0)
lib.nfs_set_gid(ctx, 0)
rc = lib.nfs_mount(ctx, server.encode(), path.encode())
stage = "mount"
if rc == 0:
    stage, rc = op, call(ctx, ("/" + name).encode())
print(stage, rc, (lib.nfs_get_error(ctx) or b"").decode(errors="replace").replace("\n", " ") if rc else "")
"""


def kv(key: str, value: object) -> None:
    print(f"{key}={value}", flush=True)


def url(server: str, path: str, name: str) -> str:
    return f"nfs://{server}/{path.strip('/')}/{name}?uid=0&gid=0"


def libnfs(op: str, server: str, path: str, name: str) -> tuple[str, int, str]:
    """(stage, rc, message) of one libnfs call (mkdir, unlink, rmdir) on the export."""
    try:
        r = subprocess.run([sys.executable, "-c", OP, op, server, path, name],
                           capture_output=True, text=True, timeout=OP_SECONDS)  # fmt: skip
    except subprocess.TimeoutExpired:
        return op, -1, f"no answer within {OP_SECONDS}s"
    stage, _, rest = r.stdout.strip().partition(" ")
    rc, _, message = rest.partition(" ")
    if r.returncode or not rc.lstrip("-").isdigit():
        return op, -1, (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
    return stage, int(rc), message


def problem(stage: str, rc: int, message: str) -> str:
    """What the export's answer means, in the preflight's words, with the server's own."""
    if message.startswith("not done within"):
        return f"too slow: the {stage} was {message}"
    if stage == "mount":
        what = "not reachable"
    elif rc == -EROFS or "ROFS" in message or "Read-only" in message:
        what = "read-only"
    else:
        what = "not writable"
    return f"{what} ({message})" if message else what


def transfer(argv: list[str], seconds: float) -> tuple[int, float, str]:
    """(bytes on its standard output, seconds taken, '' or why it failed) of one client call,
    killed after `seconds`."""
    t0, got = time.perf_counter(), 0
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    out, late = p.stdout.fileno(), f"not done within {seconds:g}s"
    try:
        while True:
            left = seconds - (time.perf_counter() - t0)
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return got, time.perf_counter() - t0, late
            data = os.read(out, CHUNK)
            if not data:
                break
            got += len(data)
        rc = p.wait(timeout=max(0.5, seconds - (time.perf_counter() - t0)))
    except subprocess.TimeoutExpired:
        return got, time.perf_counter() - t0, late
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    elapsed = time.perf_counter() - t0
    text = p.stderr.read().decode(errors="replace")
    code = NFS_ERROR.search(text)  # the server's answer, without the URL around it
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    why = f"{argv[0]}: {code.group(0)}" if code else lines[0] if lines else f"{argv[0]} exit {rc}"
    return got, elapsed, "" if rc == 0 else why


def measure(server: str, path: str, node: str, size: int, seconds: float) -> None:
    name = f"{DIR}/{node}"
    stage, rc, message = libnfs("mkdir", server, path, DIR)
    if rc and rc != -EEXIST:
        if stage != "mount":  # a mkdir that timed out may still have made it
            libnfs("rmdir", server, path, DIR)
        return kv("nfs_write_error", f"{server}:{path} {problem(stage, rc, message)}")
    fd, src = tempfile.mkstemp(prefix="appliance-nfsperf.")
    try:
        os.ftruncate(fd, size)  # sparse: reading it costs no disk
        os.close(fd)
        rounds(server, path, name, src, size, seconds)
    finally:
        os.unlink(src)
        cleanup(server, path, name)


def rounds(server: str, path: str, name: str, src: str, size: int, seconds: float) -> None:
    """ROUNDS times: write the file from `src` (a new one each time), read it back; the best of
    each, as the disk test does: a shared filer's worst moment is noise, its best is what the
    path can do."""
    writes: list[float] = []
    reads: list[float] = []
    for i in range(ROUNDS):
        if i:
            libnfs("unlink", server, path, name)  # nfs-cp starts from no file, as in round one
        _, elapsed, why = transfer(["nfs-cp", src, url(server, path, name)], seconds)
        if why:
            return kv("nfs_write_error", f"{server}:{path} {problem('write', 0, why)}")
        writes.append(size / max(elapsed, 1e-6) / 1e6)
        got, elapsed, why = transfer(["nfs-cat", url(server, path, name)], seconds)
        if why or got != size:
            kv("nfs_write_mbps", f"{max(writes):.1f}")
            return kv(
                "nfs_read_error",
                f"{server}:{path}: read back {got} of {size} bytes" + (f": {why}" if why else ""),
            )
        reads.append(size / max(elapsed, 1e-6) / 1e6)
    kv("nfs_write_mbps", f"{max(writes):.1f}")
    kv("nfs_read_mbps", f"{max(reads):.1f}")
    kv("nfs_bytes", size)


def cleanup(server: str, path: str, name: str) -> None:
    """The file (gone already is fine), then the directory unless another node's file is in it."""
    _, rc, message = libnfs("unlink", server, path, name)
    if rc and rc != -ENOENT:
        return kv("nfs_cleanup_error", f"{name} is left on {server}:{path}: {message or rc}")
    _, rc, message = libnfs("rmdir", server, path, DIR)
    if rc and rc not in (-ENOENT, -ENOTEMPTY, -EEXIST):
        kv("nfs_cleanup_error", f"{DIR}/ is left on {server}:{path}: {message or rc}")


def main(server: str, path: str, node: str, mb: float, seconds: float) -> None:
    missing = [t for t in ("nfs-cp", "nfs-cat") if not shutil.which(t)]
    if missing:
        return kv("nfs_skip", f"libnfs-utils ({', '.join(missing)}) is not installed yet: the install's "
                  "storage_nfs role adds it")  # fmt: skip
    measure(server, path, node, int(mb * 1048576), seconds)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[2], float(a[3]), float(a[4]))
