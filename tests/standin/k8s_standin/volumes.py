"""A container's volumes, as the kubelet's volume plugins set them up before it starts: hostPath
volumes bind the host's path; configMap volumes are the ConfigMap's keys written as files under the
pod's directory, then bound into the container read-only.

hostPath (pkg/volume/hostpath/host_path.go): DirectoryOrCreate makes a 0755 directory, FileOrCreate
an empty 0644 file; a path still missing then is made a 0755 directory, as containerd's CRI does for
any bind mount (pkg/cri/opts/spec_linux.go WithMounts: "Create the host path if it doesn't exist", as
seen in excerpts of the code index that name no tag).

configMap (pkg/volume/configmap/configmap.go, the files laid out as pkg/volume/util/atomic_writer.go
lays them out; both read as remembered, not at a tag): the volume's directory is
/var/lib/kubelet/pods/<uid>/volumes/kubernetes.io~configmap/<volume>; the files go into a new
`..<timestamp>` directory, `..data` is switched to it by a rename, and each top-level name is a
symlink into `..data`. Every key, or only `items` (key -> path, with their mode), at defaultMode
(0644 unless set). A ConfigMap that does not exist fails the setup unless the volume is `optional`,
with the kubelet's event `MountVolume.SetUp failed for volume "V" : configmap "N" not found`
(operationexecutor's GenerateError, as the code index's operation_generator.go shows it, and the
configmap manager's NotFound for the resource "configmap"); an item naming a key the ConfigMap lacks
fails with configmap.go's `configmap references non-existent config key: KEY`.

Limits: written once when a container starts, not refreshed while the pod runs; secret, projected,
emptyDir and downward-API volumes are not set up (nothing in the lab mounts them into a container
that runs for real).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time

from .client import ApiClient, ApiError
from .util import hp, write_file

POD_DIR = "/var/lib/kubelet/pods"


class MountError(Exception):
    """The setup of volume NAME failed: the kubelet's FailedMount event says `message`."""

    def __init__(self, volume: str, why: str) -> None:
        super().__init__(f'MountVolume.SetUp failed for volume "{volume}" : {why}')


def mounts(client: ApiClient, pod: dict, c: dict) -> list[tuple[str, str, bool]]:
    """(node path, mountPath, read-only) for each of C's volume mounts that the lab sets up."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    out = []
    for m in c.get("volumeMounts") or []:
        v = volumes.get(m.get("name", ""), {})
        if v.get("hostPath"):
            out.append((_host_path(v["hostPath"]), m["mountPath"], bool(m.get("readOnly"))))
        elif v.get("configMap"):
            out.append((_config_map(client, pod, v["name"], v["configMap"]), m["mountPath"], True))
    return out


def remove_pod_dir(uid: str) -> None:
    """What the kubelet keeps of a pod under /var/lib/kubelet/pods, gone with the pod."""
    if uid:
        shutil.rmtree(hp(f"{POD_DIR}/{uid}"), ignore_errors=True)


def _host_path(src: dict) -> str:
    path, kind = src["path"], src.get("type", "")
    if kind == "DirectoryOrCreate":
        os.makedirs(hp(path), mode=0o755, exist_ok=True)
    elif kind == "FileOrCreate" and not os.path.exists(hp(path)):
        os.makedirs(os.path.dirname(hp(path)), mode=0o755, exist_ok=True)
        with open(hp(path), "a", encoding="utf-8"):
            os.chmod(hp(path), 0o644)
    if not os.path.exists(hp(path)):
        os.makedirs(hp(path), mode=0o755)
    return path


def _config_map(client: ApiClient, pod: dict, volume: str, src: dict) -> str:
    meta = pod["metadata"]
    name, optional = src.get("name", ""), bool(src.get("optional"))
    try:
        data = client.get(f"/api/v1/namespaces/{meta['namespace']}/configmaps/{name}").get("data") or {}
    except ApiError as e:
        if e.code != 404:
            raise
        if not optional:
            raise MountError(volume, f'configmap "{name}" not found') from None
        data = {}
    mode = int(src.get("defaultMode", 0o644))
    files: dict[str, tuple[str, int]] = {}
    for item in src.get("items") or [{"key": k, "path": k} for k in sorted(data)]:
        if item["key"] not in data:
            if optional:
                continue
            raise MountError(volume, f"configmap references non-existent config key: {item['key']}")
        files[item["path"]] = (data[item["key"]], int(item.get("mode", mode)))
    base = f"{POD_DIR}/{meta['uid']}/volumes/kubernetes.io~configmap/{volume}"
    _write_atomic(hp(base), files)
    return base


def _write_atomic(base: str, files: dict[str, tuple[str, int]]) -> None:
    """atomic_writer.go's layout: a new `..<timestamp>` directory, `..data` renamed onto it, a
    symlink per top-level name; nothing is written when `..data` already holds these files."""
    data = os.path.join(base, "..data")
    if os.path.isdir(data) and _current(data, files):
        return
    os.makedirs(base, mode=0o755, exist_ok=True)
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()) + f"{time.time_ns() % 10**9:09d}"
    for rel, (text, mode) in files.items():
        write_file(os.path.join(base, stamp, rel), text, mode)
    os.makedirs(os.path.join(base, stamp), exist_ok=True)
    old = os.readlink(data) if os.path.islink(data) else None
    with contextlib.suppress(FileNotFoundError):  # what an interrupted switch left
        os.remove(os.path.join(base, "..data_tmp"))
    os.symlink(stamp, os.path.join(base, "..data_tmp"))
    os.replace(os.path.join(base, "..data_tmp"), data)
    tops = {rel.split("/", 1)[0] for rel in files}
    for top in tops - set(os.listdir(base)):
        os.symlink(os.path.join("..data", top), os.path.join(base, top))
    for name in os.listdir(base):  # the files before, and names no longer in the ConfigMap
        path = os.path.join(base, name)
        if name == old:
            shutil.rmtree(path, ignore_errors=True)
        elif not name.startswith("..") and name not in tops:
            os.remove(path)


def _current(data: str, files: dict[str, tuple[str, int]]) -> bool:
    for rel, (text, _mode) in files.items():
        try:
            with open(os.path.join(data, rel), encoding="utf-8") as f:
                if f.read() != text:
                    return False
        except OSError:
            return False
    return sum(len(names) for _, _, names in os.walk(data)) == len(files)
