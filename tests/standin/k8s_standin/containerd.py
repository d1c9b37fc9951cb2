"""containerd as crictl and kubeadm see it (ctr on the CRI socket)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from typing import Any

from .util import hp, read_text, run

# --------------------------------------------------------------------------- containerd (what crictl talks to)


def sock_path(endpoint: str) -> str:
    return endpoint[7:] if endpoint.startswith("unix://") else endpoint


def ctr(endpoint: str, *args: str, timeout: float = 30) -> tuple[int, str]:
    return run(["ctr", "--address", sock_path(endpoint), "--connect-timeout", "2s", *args], timeout=timeout)


def crictl_fatal(msg: str) -> str:
    """crictl's logrus fatal line (non-tty form, as kubeadm captures it). logrus' text formatter
    writes a value with any character outside [A-Za-z0-9-._/@^+] Go-quoted (%q): sirupsen/logrus
    text_formatter.go, needsQuoting and appendValue, at 01105720. JSON's escapes stand in for %q's;
    they differ only for control and non-printable characters (\\u0007 where Go writes \\a)."""
    plain = re.fullmatch(r"[A-Za-z0-9._/@^+-]*", msg) and msg
    value = plain or json.dumps(msg, ensure_ascii=False)
    return f'time="{dt.datetime.now().astimezone().isoformat(timespec="seconds")}" level=fatal msg={value}\n'


def crictl_info_probe(endpoint: str) -> tuple[int, str]:
    """`crictl -r ENDPOINT info` as kubeadm's CRI check runs it: (rc, combined output)."""
    rc, out = ctr(endpoint, "version", timeout=10)
    if rc == 0 and "Server:" in out:
        if not cri_plugin_ok(endpoint):  # containerd answers, but its CRI service never registered
            return 1, crictl_fatal("getting status of runtime: rpc error: code = Unimplemented desc = unknown "
                                   "service runtime.v1alpha2.RuntimeService")  # fmt: skip
        return 0, json.dumps(cri_info(endpoint, out), indent=2) + "\n"
    ep = endpoint if "://" in endpoint else f"unix://{endpoint}"
    return 1, crictl_fatal(f"connect: connect endpoint '{ep}', make sure you are running as root and the endpoint "
                           "has been started: context deadline exceeded")  # fmt: skip


def cri_plugin_ok(endpoint: str) -> bool:
    """The running daemon's view: its `cri` plugin loaded (`ctr plugins ls` STATUS ok)."""
    rc, out = ctr(endpoint, "plugins", "ls", timeout=10)
    return rc == 0 and any(
        ln.split()[1:2] == ["cri"] and ln.split()[-1] == "ok"
        for ln in out.splitlines()
        if len(ln.split()) >= 4
    )


def containerd_config() -> dict:
    """The CRI plugin settings that matter here, from /etc/containerd/config.toml (containerd defaults otherwise)."""
    out: dict[str, Any] = {"systemd_cgroup": False, "conf_dir": "/etc/cni/net.d", "bin_dir": "/opt/cni/bin",
                           "sandbox_image": "registry.k8s.io/pause:3.6", "config_path": "",
                           "auth": {}}  # fmt: skip
    text = read_text(hp("/etc/containerd/config.toml")) or ""
    try:
        import tomllib  # python 3.11+ (Debian 12)

        doc = tomllib.loads(text)
        cri = (doc.get("plugins") or {}).get("io.containerd.grpc.v1.cri") or {}
        runc = ((cri.get("containerd") or {}).get("runtimes") or {}).get("runc") or {}
        out["systemd_cgroup"] = bool((runc.get("options") or {}).get("SystemdCgroup", False))
        out["conf_dir"] = (cri.get("cni") or {}).get("conf_dir", out["conf_dir"])
        out["bin_dir"] = (cri.get("cni") or {}).get("bin_dir", out["bin_dir"])
        out["sandbox_image"] = cri.get("sandbox_image", out["sandbox_image"])
        out["config_path"] = (cri.get("registry") or {}).get("config_path", "")
        for host, conf in ((cri.get("registry") or {}).get("configs") or {}).items():
            auth = (conf or {}).get("auth") or {}
            if auth.get("username"):
                out["auth"][host] = f"{auth['username']}:{auth.get('password', '')}"
    except ImportError:
        out["systemd_cgroup"] = bool(re.search(r"SystemdCgroup\s*=\s*true", text))
    except ValueError:
        pass
    return out


def cni_network(conf_dir: str) -> dict | None:
    """The first loadable network config in conf_dir (libcni's ConfFiles, sorted), as a conflist:
    what containerd's CNI status checks for and what a sandbox's network runs (podnet.py)."""
    d = hp(conf_dir)
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith((".conf", ".conflist", ".json")))
    except OSError:
        names = []
    for n in names:
        try:
            doc = json.loads(read_text(os.path.join(d, n)) or "")
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        if n.endswith(".conflist") and isinstance(doc.get("plugins"), list) and doc["plugins"]:
            return doc
        if not n.endswith(".conflist") and doc.get("type"):  # a single .conf is a list of one
            return {"name": doc.get("name", ""), "cniVersion": doc.get("cniVersion", ""), "plugins": [doc]}
    return None


def cni_ready(conf_dir: str | None = None) -> tuple[bool, str]:
    """containerd's CNI status: a loadable network config in conf_dir."""
    if cni_network(conf_dir or containerd_config()["conf_dir"]) is not None:
        return True, ""
    return False, "Network plugin returns error: cni plugin not initialized"


def containerd_version(ctr_version_out: str) -> str:
    m = re.search(r"Server:\s*\n\s*Version:\s*(\S+)", ctr_version_out)
    return m.group(1) if m else "unknown"


def cri_info(endpoint: str, ctr_version_out: str) -> dict:
    cfg = containerd_config()
    net_ok, net_msg = cni_ready(cfg["conf_dir"])
    conds = [{"type": "RuntimeReady", "status": True, "reason": "", "message": ""},
             {"type": "NetworkReady", "status": net_ok, "reason": "" if net_ok else "NetworkPluginNotReady",
              "message": net_msg}]  # fmt: skip
    return {
        "status": {"conditions": conds},
        "cniconfig": {"PluginDirs": [cfg["bin_dir"]], "PluginConfDir": cfg["conf_dir"]},
        "config": {"sandboxImage": cfg["sandbox_image"], "systemdCgroup": cfg["systemd_cgroup"],
                   "registry": {"configPath": cfg["config_path"]},
                   "containerdVersion": containerd_version(ctr_version_out)},
    }  # fmt: skip


def image_exists(endpoint: str, image: str) -> bool:
    rc, out = ctr(endpoint, "-n", "k8s.io", "images", "ls", "-q")
    return rc == 0 and image in out.split()


def registry_endpoints(config_path: str, host: str) -> list[str]:
    """The HOST:PORTs containerd pulls `host`'s images from, in order, as its hosts dir says:
    `<config_path>/<host>/hosts.toml`'s [host."URL"] tables, then its `server` (default: `host`)."""
    text = read_text(hp(os.path.join(config_path, host, "hosts.toml"))) if config_path else None
    if not text:
        return [host]
    try:
        import tomllib  # python 3.11+ (Debian 12)

        doc = tomllib.loads(text)
    except (ImportError, ValueError):
        return [host]
    urls = [*(doc.get("host") or {}), doc.get("server") or f"https://{host}"]
    out: list[str] = []
    for u in urls:
        h = u.split("://", 1)[-1].split("/", 1)[0]
        if h not in out:
            out.append(h)
    return out


def pull_image(endpoint: str, image: str) -> tuple[int, str]:
    """What `crictl pull` makes containerd's CRI plugin do: pull into k8s.io using the registry hosts dir."""
    args = ["-n", "k8s.io", "images", "pull"]
    cfg = containerd_config()
    if cfg["config_path"]:
        args += ["--hosts-dir", cfg["config_path"]]
    # CRI's registry.configs.<host>.auth is looked up by the host each request goes to: the
    # endpoint (a mirror's own HOST:PORT), not the image's registry name. ctr takes one --user for
    # every endpoint: the first endpoint's that has one.
    for host in registry_endpoints(cfg["config_path"], image.split("/", 1)[0]):
        if host in cfg["auth"]:
            args += ["--user", cfg["auth"][host]]
            break
    rc, out = ctr(endpoint, *args, image, timeout=300)
    if rc != 0:
        # ctr's last line without its own "ctr: " prefix, which the CRI plugin does not add. The
        # plugin wraps the error, so a registry's 404 keeps its NotFound code: containerd's
        # pkg/cri/server/image_pull.go and instrumented_service.go (errdefs.ToGRPC), read in the
        # code index at no tag.
        last = (out.strip().splitlines()[-1] if out.strip() else "unknown error").removeprefix("ctr: ")
        code = "NotFound" if last.endswith("not found") else "Unknown"
        return 1, crictl_fatal(f"pulling image: rpc error: code = {code} desc = failed to pull and unpack image "
                               f'"{image}": {last}')  # fmt: skip
    return 0, f"Image is up to date for {image}\n"
