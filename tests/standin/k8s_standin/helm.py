"""helm v3 as the lab's stand-in: the real chart archive, real release records, no templates.

What it does as helm does: reads the chart (helmchart.py), checks its kubeVersion against the
cluster's, computes the release's values (chart, -f files, --set) and enforces
values.schema.json, installs the chart's and its enabled subcharts' crds/ on first install (never
on upgrade, as helm), and records each revision as helm's secret storage driver does: a Secret
`sh.helm.release.v1.NAME.vN` of type helm.sh/release.v1, labels name/owner/status/version, and
the release as base64(gzip(JSON)). install, upgrade [--install], list, status, get values,
history, uninstall and rollback read and write those records.

Limits: no template is rendered and no object but the CRDs and the records is created, so
nothing a chart would run runs; --wait and --atomic have nothing to wait for. The lab's
GPU Operator release therefore proves the values, the images pulled ahead and the CRDs, not the
operator's own behaviour.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import sys
import urllib.parse
from typing import Any

import yaml

from .client import ApiClient, ApiError, Credentials, load_kubeconfig
from .flags import parse_flags
from .helmchart import (
    Chart,
    coalesce,
    enabled_subcharts,
    kube_version_ok,
    load_chart,
    parse_set,
    release_values,
    validate_schema,
)
from .util import Fail, b64, rfc3339, tabwrite

HELM_VERSION = "v3.14.4"
FLAGS = {
    "namespace": "str", "kubeconfig": "str", "install": "bool", "create-namespace": "bool", "values": "list",
    "set": "list", "wait": "bool", "timeout": "str", "atomic": "bool", "output": "str", "all-namespaces": "bool",
    "all": "bool", "revision": "str", "reuse-values": "bool", "reset-values": "bool", "short": "bool", "version": "str", "debug": "bool", "short-q": "bool",
}  # fmt: skip
SHORT = {"n": "namespace", "f": "values", "o": "output", "A": "all-namespaces", "a": "all", "q": "short-q"}
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class Helm:
    def __init__(self, flags: dict[str, Any]) -> None:
        self.flags = flags
        self.ns = flags.get("namespace") or "default"
        path = flags.get("kubeconfig") or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        self.client = ApiClient(Credentials.from_kubeconfig(load_kubeconfig(path)))

    # ---- release records ------------------------------------------------------------------------
    def releases(self, name: str | None = None, all_ns: bool = False) -> list[dict]:
        sel = urllib.parse.quote("owner=helm" + (f",name={name}" if name else ""))
        path = "/api/v1/secrets" if all_ns else f"/api/v1/namespaces/{self.ns}/secrets"
        items = self.client.get(f"{path}?labelSelector={sel}")["items"]
        out = [decode(s) for s in items if s.get("type") == "helm.sh/release.v1"]
        return sorted(out, key=lambda r: (r["namespace"], r["name"], r["version"]))

    def _write(self, rel: dict, create: bool) -> None:
        name = f"sh.helm.release.v1.{rel['name']}.v{rel['version']}"
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
                  "metadata": {"name": name, "namespace": rel["namespace"],
                               "labels": {"name": rel["name"], "owner": "helm", "status": rel["info"]["status"],
                                          "version": str(rel["version"])}},
                  "data": {"release": b64(encode(rel))}}  # fmt: skip
        base = f"/api/v1/namespaces/{rel['namespace']}/secrets"
        self.client.call("POST" if create else "PUT", base if create else f"{base}/{name}", secret)

    # ---- install / upgrade ----------------------------------------------------------------------
    def user_values(self) -> dict:
        vals: dict = {}
        for path in self.flags.get("values") or []:
            try:
                with open(path) as f:
                    vals = coalesce(vals, yaml.safe_load(f) or {})
            except OSError as e:
                raise Fail(f"Error: open {path}: {e.strerror.lower() if e.strerror else e}") from None
        for expr in self.flags.get("set") or []:
            vals = coalesce(vals, parse_set(expr))
        return vals

    def check_chart(self, chart: Chart, values: dict, prefix: str) -> None:
        want = chart.meta.get("kubeVersion")
        have = str(self.client.get("/version").get("gitVersion", ""))
        if want and not kube_version_ok(str(want), have):
            raise Fail(f"Error: {prefix}chart requires kubeVersion: {want} which is incompatible with "
                       f"Kubernetes {have}")  # fmt: skip
        validate_schema(chart, values)
        for sub in enabled_subcharts(chart, values):
            validate_schema(sub, values.get(sub.name) or {})

    def install_crds(self, chart: Chart, values: dict, prefix: str) -> None:
        for c in [chart, *enabled_subcharts(chart, values)]:
            for path, raw in c.crds:
                for doc in [d for d in yaml.safe_load_all(raw) if d]:
                    try:
                        self.client.call("POST", CRD_PATH, doc)
                    except ApiError as e:
                        if e.code != 409:  # an existing CRD is left alone, as helm does
                            raise Fail(f"Error: {prefix}failed to install CRD {path}: {e.message}") from None

    def ensure_namespace(self, prefix: str) -> None:
        try:
            self.client.get(f"/api/v1/namespaces/{self.ns}")
        except ApiError as e:
            if e.code != 404:
                raise
            if not self.flags.get("create-namespace"):
                raise Fail(
                    f'Error: {prefix}create: failed to create: namespaces "{self.ns}" not found'
                ) from None
            self.client.call("POST", "/api/v1/namespaces",
                             {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}})  # fmt: skip

    def upgrade(self, name: str, chart_path: str, install_only: bool = False) -> int:
        chart = load_chart(chart_path)
        history = self.releases(name)
        if install_only and history:
            raise Fail("Error: INSTALLATION FAILED: cannot re-use a name that is still in use")
        if not history and not (install_only or self.flags.get("install")):
            raise Fail(f'Error: UPGRADE FAILED: "{name}" has no deployed releases')
        if history and not install_only and history[-1]["info"]["status"].startswith("pending-"):
            # pkg/action/upgrade.go: a release whose last revision is pending (a helm still at work, or
            # one that was killed) takes no upgrade: errPending
            raise Fail("Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress")
        # helm v3.14.4: cmd/helm/install.go wraps an install's error in "INSTALLATION FAILED",
        # upgrade.go an upgrade's in "UPGRADE FAILED", and `upgrade --install` of a release not there
        # yet returns its install's error as it is, after saying it installs it
        prefix = "INSTALLATION FAILED: " if install_only else "UPGRADE FAILED: " if history else ""
        if not history and not install_only:
            sys.stdout.write(f'Release "{name}" does not exist. Installing it now.\n')
        user = self.user_values()
        if history and self.flags.get("reuse-values") and not self.flags.get("reset-values"):
            # helm: the last release's values, the command line's -f and --set merged over them
            user = coalesce(history[-1]["config"], user)
        values = release_values(chart, user)
        self.check_chart(chart, values, prefix)
        self.ensure_namespace(prefix)
        if not history:
            self.install_crds(chart, values, prefix)
        rel = self._new_revision(
            name, chart, user, history, "Install complete" if not history else "Upgrade complete",
            "pending-install" if not history else "pending-upgrade",
        )  # fmt: skip
        if history:
            sys.stdout.write(f'Release "{name}" has been upgraded. Happy Helming!\n')
        sys.stdout.write(status_text(rel))
        return 0

    def _new_revision(
        self, name: str, chart: Chart, user: dict, history: list[dict], desc: str, pending: str
    ) -> dict:
        """The new revision recorded first as PENDING (pending-install, -upgrade, -rollback), then
        the ones it replaces superseded and it deployed, as helm's actions do: a helm killed in
        between leaves the pending record, which the next upgrade refuses."""
        now = rfc3339()
        rel = {"name": name, "namespace": self.ns, "version": (history[-1]["version"] + 1) if history else 1,
               "info": {"first_deployed": history[0]["info"]["first_deployed"] if history else now,
                        "last_deployed": now, "deleted": "", "description": desc, "status": pending, "notes": ""},
               "chart": {"metadata": chart.meta, "values": chart.values}, "config": user, "manifest": ""}  # fmt: skip
        self._write(rel, create=True)
        for old in history:
            if old["info"]["status"] == "deployed" or (pending == "pending-rollback" and old is history[-1]):
                old["info"]["status"] = "superseded"
                self._write(old, create=False)
        rel["info"]["status"] = "deployed"
        self._write(rel, create=False)
        return rel

    # ---- the other commands ---------------------------------------------------------------------
    def rollback(self, name: str, revision: str | None) -> int:
        history = self.releases(name)
        if not history:
            raise Fail("Error: release: not found")
        target_v = int(revision) if revision else (history[-2]["version"] if len(history) > 1 else 0)
        target = next((r for r in history if r["version"] == target_v), None)
        if target is None:
            raise Fail(f"Error: release has no {target_v} version")
        chart = Chart(target["chart"]["metadata"], target["chart"]["values"], None)
        self._new_revision(
            name, chart, target["config"], history, f"Rollback to {target_v}", "pending-rollback"
        )
        sys.stdout.write("Rollback was a success! Happy Helming!\n")
        return 0

    def uninstall(self, name: str) -> int:
        history = self.releases(name)
        if not history:
            raise Fail(f"Error: uninstall: Release not loaded: {name}: release: not found")
        for r in history:
            self.client.call(
                "DELETE", f"/api/v1/namespaces/{self.ns}/secrets/sh.helm.release.v1.{name}.v{r['version']}"
            )
        sys.stdout.write(f'release "{name}" uninstalled\n')
        return 0

    def get_values(self, name: str) -> int:
        rel = self._pick(name)
        vals = rel["config"]
        if self.flags.get("all"):
            vals = coalesce(rel["chart"]["values"], rel["config"])
        out = self.flags.get("output") or "table"
        if out == "json":
            sys.stdout.write(json.dumps(vals) + "\n")
        elif out == "yaml":
            sys.stdout.write(yaml.safe_dump(vals, default_flow_style=False))
        else:
            head = "COMPUTED VALUES:" if self.flags.get("all") else "USER-SUPPLIED VALUES:"
            sys.stdout.write(
                f"{head}\n{yaml.safe_dump(vals, default_flow_style=False) if vals else 'null'}\n"
            )
        return 0

    def _pick(self, name: str) -> dict:
        history = self.releases(name)
        rev = self.flags.get("revision")
        rel = (
            next((r for r in history if str(r["version"]) == rev), None)
            if rev
            else (history[-1] if history else None)
        )
        if rel is None:
            raise Fail("Error: release: not found")
        return rel

    def list(self) -> int:
        latest: dict[tuple[str, str], dict] = {}
        for r in self.releases(all_ns=bool(self.flags.get("all-namespaces"))):
            latest[(r["namespace"], r["name"])] = r
        # by default deployed and failed releases, as helm v3.14.4's pkg/action/list.go SetStateMask;
        # every one with -a/--all
        shown = None if self.flags.get("all") else ("deployed", "failed")
        rels = [r for r in latest.values() if shown is None or r["info"]["status"] in shown]
        if self.flags.get("output") == "json":
            sys.stdout.write(json.dumps([summary(r) for r in rels]) + "\n")
        elif self.flags.get("short-q"):
            sys.stdout.write("".join(f"{r['name']}\n" for r in rels))
        else:
            rows = [["NAME", "NAMESPACE", "REVISION", "UPDATED", "STATUS", "CHART", "APP VERSION"]]
            rows += [[s["name"], s["namespace"], s["revision"], s["updated"], s["status"], s["chart"], s["app_version"]]
                     for s in map(summary, rels)]  # fmt: skip
            sys.stdout.write(tabwrite(rows))
        return 0

    def history(self, name: str) -> int:
        history = self.releases(name)
        if not history:
            raise Fail("Error: release: not found")
        if self.flags.get("output") == "json":  # helm's fields: revision, updated, status, chart, ...
            out = [{k: v for k, v in summary(r).items() if k not in ("name", "namespace")}
                   | {"description": r["info"]["description"]} for r in history]  # fmt: skip
            sys.stdout.write(json.dumps(out) + "\n")
            return 0
        rows = [["REVISION", "UPDATED", "STATUS", "CHART", "APP VERSION", "DESCRIPTION"]]
        for r in history:
            s = summary(r)
            rows.append(
                [
                    s["revision"],
                    s["updated"],
                    s["status"],
                    s["chart"],
                    s["app_version"],
                    r["info"]["description"],
                ]
            )
        sys.stdout.write(tabwrite(rows))
        return 0


def encode(rel: dict) -> str:
    """helm's storage encoding of a release: base64 of the gzipped JSON."""
    return base64.b64encode(gzip.compress(json.dumps(rel).encode(), mtime=0)).decode()


def decode(secret: dict) -> dict:
    raw = base64.b64decode(base64.b64decode(secret["data"]["release"]))
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def summary(r: dict) -> dict:
    meta = r["chart"]["metadata"]
    return {"name": r["name"], "namespace": r["namespace"], "revision": str(r["version"]),
            "updated": r["info"]["last_deployed"], "status": r["info"]["status"],
            "chart": f"{meta.get('name')}-{meta.get('version')}", "app_version": str(meta.get("appVersion", ""))}  # fmt: skip


def status_text(r: dict) -> str:
    return (f"NAME: {r['name']}\nLAST DEPLOYED: {r['info']['last_deployed']}\nNAMESPACE: {r['namespace']}\n"
            f"STATUS: {r['info']['status']}\nREVISION: {r['version']}\nTEST SUITE: None\n")  # fmt: skip


def show(args: list[str]) -> int:
    """`helm show values|chart CHART`: the archive's values.yaml as written, or its Chart.yaml."""
    if len(args) < 2 or args[0] not in ("values", "chart"):
        raise Fail('Error: "helm show" requires a subcommand (values, chart) and one argument')
    chart = load_chart(args[1])
    if args[0] == "values":
        sys.stdout.write(chart.raw_values.decode())
    else:
        sys.stdout.write(yaml.safe_dump(chart.meta, sort_keys=False))
    return 0


def helm_main(argv: list[str]) -> int:
    flags, pos = parse_flags(argv, FLAGS, SHORT)
    if not pos:
        raise Fail("Error: a command is required: install, upgrade, list, status, get, history, uninstall, "
                   "rollback, show, version")  # fmt: skip
    cmd, args = pos[0], pos[1:]
    if cmd == "show":
        return show(args)
    if cmd == "version":
        short = f"{HELM_VERSION}+gstandin"
        sys.stdout.write(f"{short}\n" if flags.get("short") else
                         f'version.BuildInfo{{Version:"{HELM_VERSION}", GitCommit:"standin", GitTreeState:"clean", '
                         'GoVersion:"standin"}\n')  # fmt: skip
        return 0
    h = Helm(flags)
    need = {
        "install": 2,
        "upgrade": 2,
        "status": 1,
        "history": 1,
        "uninstall": 1,
        "rollback": 1,
        "get": 2,
        "list": 0,
    }
    if cmd not in need:
        raise Fail(f'Error: unknown command "{cmd}" for "helm"')
    if len(args) < need[cmd]:
        raise Fail(f'Error: "helm {cmd}" requires at least {need[cmd]} argument(s)')
    if cmd == "install":
        return h.upgrade(args[0], args[1], install_only=True)
    if cmd == "upgrade":
        return h.upgrade(args[0], args[1])
    if cmd == "status":
        sys.stdout.write(status_text(h._pick(args[0])))
        return 0
    if cmd == "get" and args[0] == "values":
        return h.get_values(args[1])
    return {"history": lambda: h.history(args[0]), "uninstall": lambda: h.uninstall(args[0]),
            "rollback": lambda: h.rollback(args[0], args[1] if len(args) > 1 else None),
            "list": h.list}.get(cmd, lambda: 2)()  # fmt: skip
