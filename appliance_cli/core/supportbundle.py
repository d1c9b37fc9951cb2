"""`appliance support-bundle`: one archive a field engineer hands to support.

What goes in: the toolkit's version, the site config (secret-bearing values redacted), the last
runs' artifacts, the diagnostics reports kept in the site directory, per node its versions and a
journal excerpt of containerd, kubelet and the registry, and from the master the cluster as
`kubectl get` and `helm list` show it. A node that does not answer gets a note, not a failure.

Secrets never get in: every text is scrubbed before it is written. The scrubber knows the
shapes (bootstrap tokens, PEM private keys, `password:`/`token:`-style fields, credentials in
URLs, basic-auth headers) and the site's own secret values, read from the master at collection
time (the registry pull password, the scheduler admin password, the researcher registry's
password files on the controller), so a secret in any shape is replaced by `<redacted>`.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from appliance_cli import __version__
from appliance_cli.core.install import runs_dir
from appliance_cli.core.paths import PATHS
from appliance_cli.core.remote import run_on
from appliance_cli.core.siteconfig import Node, SiteConfig
from appliance_cli.errors import ApplianceError
from appliance_cli.fsutil import atomic_stream, read_regular

REDACTED = "<redacted>"
# How much of each journal and how many runs: enough to see a failure, small enough to mail.
JOURNAL_UNITS = ("containerd", "kubelet", "docker-registry", "kube-apiserver-standin")
JOURNAL_LINES = 2000
LAST_RUNS = 3
RUN_FILE_MAX = 4 * 1024 * 1024

# Secret files on the master (passwords the toolkit generated, kept 0600 under /etc/appliance):
# their contents are scrubbed wherever they appear.
MASTER_SECRETS_COMMAND = [
    "find", "/etc/appliance", "-type", "f", "(", "-name", "*password*", "-o", "-name", "*secret*", "-o",
    "-name", "*token*", ")", "-size", "-8k", "-exec", "awk", "1", "{}", "+",
]  # fmt: skip  # awk 1: every file ends in a newline, one secret per line

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # kubeadm bootstrap tokens (id.secret)
    (re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b"), REDACTED),
    # PEM private keys, any type
    (
        re.compile(r"-----BEGIN ([A-Z ]*)PRIVATE KEY-----.*?-----END \1PRIVATE KEY-----", re.S),
        f"-----BEGIN PRIVATE KEY-----{REDACTED}-----END PRIVATE KEY-----",
    ),
    # key: value / "key": "value" for secret-looking keys (YAML, JSON, INI, env)
    (
        re.compile(
            r"""(?ix)
            (["']?[\w.-]*(?:password|passwd|secret|token|key[-_]?data|private[-_]?key|auth)["']?
             \s*[:=]\s*)
            (["']?)(?!<redacted>)([^\s"',}]+)\2"""
        ),
        rf"\1\2{REDACTED}\2",
    ),
    # user:password@host in URLs
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+):[^@\s/]+@"), rf"\1:{REDACTED}@"),
    # Authorization headers
    (re.compile(r"(?i)(authorization:\s*(?:basic|bearer)\s+)\S+"), rf"\1{REDACTED}"),
)


@dataclass
class Scrubber:
    """Replaces the site's known secret values, then every secret-shaped string."""

    secrets: set[str] = field(default_factory=set)

    def add(self, values: Iterable[str]) -> None:
        self.secrets |= {v.strip() for v in values if len(v.strip()) >= 6}  # short ones would mangle text

    def __call__(self, text: str) -> str:
        for value in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(value, REDACTED)
        for pattern, repl in _PATTERNS:
            text = pattern.sub(repl, text)
        return text


Runner = Callable[[SiteConfig, Node, list[str], int], str]


def over_ssh(cfg: SiteConfig, node: Node, command: list[str], timeout: int) -> str:
    """The Runner `appliance support-bundle` uses; tests hand collect() their own."""
    return run_on(cfg, node, command, timeout=timeout)


@dataclass
class Collected:
    path: Path
    members: list[str]
    unreachable: dict[str, str]


def _site_config_text(cfg: SiteConfig) -> str:
    """The site config as loaded (defaults filled in), secret-bearing values out: the file names
    of secrets stay (they say where things are), never their contents."""
    data = cfg.model_dump(mode="json")
    return yaml.safe_dump(data, sort_keys=False)


def _with_stderr(argv: list[str]) -> list[str]:
    """argv with its standard error in its output (what support reads), through `sh -c` whose
    script is constant: every word of argv stays one argument."""
    return ["sh", "-c", '"$@" 2>&1', "sh", *argv]


def _node_commands(cfg: SiteConfig, node: Node, since: str) -> dict[str, list[str]]:
    units = [w for u in JOURNAL_UNITS for w in ("-u", u)]
    cmds = {
        "versions.txt": ["sh", "-c", "(uname -a; cat /etc/os-release; containerd --version; kubelet --version; "
                         "kubeadm version -o short; crictl --version; runc --version) 2>&1"],
        "journal.txt": _with_stderr(["journalctl", *units, f"--since={since}", "-n", str(JOURNAL_LINES),
                                     "--no-pager", "-o", "short-iso"]),
        "disk.txt": _with_stderr(["df", "-h"]),
    }  # fmt: skip
    if node.name == cfg.master.name:
        kubectl = ["kubectl", "--kubeconfig", PATHS.admin_conf]
        cmds |= {
            "kubectl-nodes.txt": _with_stderr([*kubectl, "get", "nodes", "-o", "wide"]),
            "kubectl-pods.txt": _with_stderr([*kubectl, "get", "pods", "-A", "-o", "wide"]),
            "kubectl-events.txt": _with_stderr([*kubectl, "get", "events", "-A"]),
            "kubectl-nodes.json": _with_stderr([*kubectl, "get", "nodes", "-o", "json"]),
            "helm-releases.txt": _with_stderr(["helm", "--kubeconfig", PATHS.admin_conf, "list", "-A"]),
        }
    return cmds


def _master_secrets(cfg: SiteConfig, run: Runner) -> list[str]:
    try:
        out = run(cfg, cfg.master, MASTER_SECRETS_COMMAND, 60)
    except ApplianceError:
        return []  # an unreachable master: the shapes still catch what matters
    return out.splitlines()


def _controller_secrets(cfg: SiteConfig) -> list[str]:
    values = []
    if cfg.researcher_registry:
        for user in cfg.researcher_registry.users:
            try:  # not there, or no regular file (a FIFO waited forever): no value to redact
                data = read_regular(cfg.resolve(user.password_file))
            except OSError:
                continue
            # any bytes: a value that is not UTF-8 cannot appear in the (UTF-8) text redacted
            values.append(data.decode(errors="replace"))
    return values


def _run_files(cfg: SiteConfig) -> list[tuple[str, Path]]:
    root = runs_dir(cfg)
    if not root.is_dir():
        return []
    runs = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.name)[-LAST_RUNS:]
    files = []
    for run in runs:
        for p in sorted(run.rglob("*")):
            if p.is_file() and p.stat().st_size <= RUN_FILE_MAX and "env" not in p.relative_to(run).parts[:1]:
                files.append((f"runs/{run.name}/{p.relative_to(run).as_posix()}", p))
    return files


def _report_files(cfg: SiteConfig) -> list[tuple[str, Path]]:
    out = []
    for pattern in ("*.json", "*.html", "*.txt", "*.xml"):
        for p in sorted(cfg.site_dir.glob(f"reports/{pattern}")):
            out.append((f"reports/{p.name}", p))
    return out


def collect(
    cfg: SiteConfig,
    out_dir: Path,
    run: Runner = over_ssh,
    since: str = "-24h",
    now: Callable[[], float] = time.time,
) -> Collected:
    """Write appliance-support-<site>-<UTC stamp>.tar.gz into out_dir and return what it holds."""
    scrub = Scrubber()
    scrub.add(_controller_secrets(cfg))
    scrub.add(_master_secrets(cfg, run))
    entries: dict[str, str | bytes] = {
        "versions.txt": f"appliance {__version__}\n",
        "site/appliance.yml": _site_config_text(cfg),
    }
    unreachable: dict[str, str] = {}
    for node in cfg.nodes:
        for name, command in _node_commands(cfg, node, since).items():
            try:
                entries[f"nodes/{node.name}/{name}"] = run(cfg, node, command, 120)
            except ApplianceError as exc:
                unreachable.setdefault(node.name, exc.message)
                entries[f"nodes/{node.name}/UNREACHABLE.txt"] = exc.message + "\n"
                break
    for arcname, path in [*_run_files(cfg), *_report_files(cfg)]:
        try:
            entries[arcname] = path.read_text()
        except UnicodeDecodeError:
            continue  # binary artifacts are not what support reads
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now()))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"appliance-support-{cfg.site.name.replace(' ', '_')}-{stamp}.tar.gz"
    members = []
    with atomic_stream(target, 0o600) as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for arcname, content in sorted(entries.items()):
            text = content if isinstance(content, str) else content.decode(errors="replace")
            data = scrub(text).encode()
            info = tarfile.TarInfo(f"support/{arcname}")
            info.size, info.mode, info.mtime = len(data), 0o600, int(now())
            tar.addfile(info, io.BytesIO(data))
            members.append(arcname)
        index = json.dumps({"members": members, "unreachable": unreachable}, indent=2).encode()
        info = tarfile.TarInfo("support/index.json")
        info.size, info.mode, info.mtime = len(index), 0o600, int(now())
        tar.addfile(info, io.BytesIO(index))
    return Collected(target, members, unreachable)
