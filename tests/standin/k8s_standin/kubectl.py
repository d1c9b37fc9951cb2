"""kubectl."""

from __future__ import annotations

import copy
import json
import os
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import yaml

from .apiserver import BUILTIN_RESOURCES, qualified, res_path, version_info
from .client import ApiClient, ApiError, Credentials, Unreachable, load_kubeconfig
from .drain import wait_deleted
from .flags import parse_flags
from .jsonpath import _jp_eval, _jp_path, jsonpath
from .serverside import table_rows
from .util import (
    CONTROLLER_TAINTS,
    VERSION,
    Fail,
    go_json,
    group_of,
    now,
    parse_duration,
    read_text,
    tabwrite,
)

# --------------------------------------------------------------------------- kubectl

KUBECTL_FLAGS = {
    "kubeconfig": "str", "namespace": "str", "all-namespaces": "bool", "output": "str", "selector": "str",
    "overwrite": "bool", "all": "bool", "ignore-daemonsets": "bool", "delete-emptydir-data": "bool",
    "delete-local-data": "bool", "force": "bool", "timeout": "str", "for": "str", "filename": "list", "raw": "str",
    "client": "bool", "short": "bool", "grace-period": "str", "ignore-not-found": "bool", "dry-run": "str",
    "validate": "str", "recursive": "bool", "server-side": "bool", "field-manager": "str", "context": "str",
    "request-timeout": "str", "v": "str", "show-labels": "bool", "no-headers": "bool", "wait": "bool",
    "server": "str", "insecure-skip-tls-verify": "bool", "chunk-size": "str", "disable-eviction": "bool",
    "skip-wait-for-delete-timeout": "str", "pod-selector": "str", "save-config": "bool", "record": "bool",
}  # fmt: skip
KUBECTL_SHORT = {"n": "namespace", "A": "all-namespaces", "o": "output", "l": "selector", "f": "filename",
                 "R": "recursive", "v": "v"}  # fmt: skip
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def unrecognized(src: str, obj: dict) -> str:
    """kubectl's words for a manifest object whose kind the server does not serve."""
    return f'error: unable to recognize "{src}": no matches for kind "{obj["kind"]}" in version "{obj["apiVersion"]}"'


class Kubectl:
    def __init__(self, flags: dict[str, Any]) -> None:
        self.flags = flags
        path = flags.get("kubeconfig")
        if not path:
            for p in (os.environ.get("KUBECONFIG") or "").split(":"):
                if p and os.path.exists(p):
                    path = p
                    break
        if not path and os.path.exists(os.path.expanduser("~/.kube/config")):
            path = os.path.expanduser("~/.kube/config")
        if path:
            creds = Credentials.from_kubeconfig(load_kubeconfig(path))
        else:  # no kubeconfig at all: kubectl's fallback
            creds = Credentials("http://localhost:8080")
        if flags.get("insecure-skip-tls-verify"):
            creds.insecure = True
        timeout = (
            parse_duration(flags["request-timeout"])
            if flags.get("request-timeout") not in (None, "0")
            else 30
        )
        self.client = ApiClient(creds, timeout=timeout)
        self.ns = flags.get("namespace") or "default"
        self.out = sys.stdout

    # ---- resource mapping
    def resolve(self, word: str) -> tuple[str, str, str, str, bool]:
        word_l = word.lower()
        name, _, grp = word_l.partition(".")
        cands = list(BUILTIN_RESOURCES)
        for r in cands + self._server_resources():
            if grp and r[0] != grp:
                continue
            if name in (r[3], r[2].lower(), *r[5]):
                return r[0], r[1], r[2], r[3], r[4]
        raise Fail(f'error: the server doesn\'t have a resource type "{word}"')

    def _server_resources(self) -> list[tuple]:
        out: list[tuple] = []
        known = {(r[0], r[1]) for r in BUILTIN_RESOURCES}
        for g in self.client.get("/apis").get("groups", []):
            for v in g.get("versions", []):
                if (g["name"], v["version"]) in known:
                    continue
                for r in self.client.get(f"/apis/{g['name']}/{v['version']}").get("resources", []):
                    out.append(
                        (
                            g["name"],
                            v["version"],
                            r["kind"],
                            r["name"],
                            r["namespaced"],
                            r.get("shortNames") or [],
                            "",
                        )
                    )
        return out

    def mapping_for(self, api_version: str, kind: str) -> tuple[str, str, str, bool] | None:
        g, v = group_of(api_version)
        for r in BUILTIN_RESOURCES:
            if (r[0], r[1], r[2]) == (g, v, kind):
                return g, v, r[3], r[4]
        if not g:
            return None
        try:
            lst = self.client.get(f"/apis/{g}/{v}")
        except ApiError:
            return None
        for r in lst.get("resources", []):
            if r["kind"] == kind:
                return g, v, r["name"], r["namespaced"]
        return None

    # ---- output
    def print_objects(self, objs: list[dict], res: tuple[str, str, str, str, bool], single: bool) -> None:
        fmt = self.flags.get("output", "")
        g, _v, kind, _plural, namespaced = res
        if fmt in ("json", "yaml") or fmt.startswith(("jsonpath", "go-template")):
            doc: Any = objs[0] if single else {"apiVersion": "v1", "items": objs, "kind": "List",
                                               "metadata": {"resourceVersion": "", "selfLink": ""}}  # fmt: skip
            if fmt == "json":
                self.out.write(json.dumps(doc, indent=4, sort_keys=True, ensure_ascii=False) + "\n")
            elif fmt == "yaml":
                self.out.write(yaml.safe_dump(doc, default_flow_style=False, sort_keys=True))
            elif fmt.startswith("jsonpath"):
                tmpl = fmt.split("=", 1)[1] if "=" in fmt else ""
                if fmt.startswith("jsonpath-as-json"):
                    self.out.write(json.dumps(_jp_eval([doc], _jp_path(tmpl.strip("{}"))), indent=4) + "\n")
                else:
                    self.out.write(jsonpath(tmpl, doc))
            else:
                raise Fail("error: standin: go-template output is not supported")
            return
        if fmt == "name":
            for o in objs:
                self.out.write(f"{kind.lower()}{'.' + g if g else ''}/{o['metadata']['name']}\n")
            return
        if fmt not in ("", "wide"):
            raise Fail(f'error: unable to match a printer suitable for the output format "{fmt}", allowed formats are: '
                       "custom-columns,custom-columns-file,go-template,go-template-file,json,jsonpath,jsonpath-as-json,"
                       "jsonpath-file,name,template,templatefile,wide,yaml")  # fmt: skip
        if not objs:
            where = f" in {self.ns} namespace" if namespaced and not self.flags.get("all-namespaces") else ""
            sys.stderr.write(f"No resources found{where}.\n")
            return
        header, rows = table_rows(kind, objs, fmt == "wide")
        if self.flags.get("show-labels"):
            header.append("LABELS")
            for r, o in zip(rows, objs, strict=True):
                lab = o["metadata"].get("labels") or {}
                r.append(",".join(f"{k}={v}" for k, v in sorted(lab.items())) or "<none>")
        if self.flags.get("all-namespaces") and namespaced:
            header.insert(0, "NAMESPACE")
            for r, o in zip(rows, objs, strict=True):
                r.insert(0, o["metadata"].get("namespace", ""))
        self.out.write(tabwrite(([] if self.flags.get("no-headers") else [header]) + rows))

    # ---- commands
    def cmd_get(self, args: list[str]) -> int:
        if self.flags.get("raw"):
            code, payload = self.client.raw("GET", self.flags["raw"])
            if code >= 400:
                doc = json.loads(payload or b"{}") if payload.startswith(b"{") else {}
                raise ApiError(code, doc.get("reason", "Unknown"), doc.get("message", payload.decode()))
            self.out.write(payload.decode())
            return 0
        if not args:
            raise Fail(
                'You must specify the type of resource to get. Use "kubectl api-resources" for a complete list of supported resources.'
            )
        if "/" in args[0]:
            word, name = args[0].split("/", 1)
            names = [name] + [a.split("/", 1)[1] for a in args[1:]]
        else:
            word, names = args[0], args[1:]
        res = self.resolve(word.split(",")[0])
        g, v, _kind, plural, namespaced = res
        ns = None if (self.flags.get("all-namespaces") and not names) else (self.ns if namespaced else None)
        if names:
            objs = []
            for n in names:
                objs.append(self.client.get(res_path(g, v, plural, ns, n)))
            self.print_objects(objs, res, single=len(names) == 1)
            return 0
        path = res_path(g, v, plural, ns)
        if self.flags.get("selector"):
            path += "?labelSelector=" + urllib.parse.quote(self.flags["selector"])
        objs = self.client.get(path)["items"]
        self.print_objects(objs, res, single=False)
        return 0

    def targets(self, args: list[str], default_kind: str | None = None) -> tuple[tuple, list[str], list[str]]:
        """TYPE NAME... [rest] or TYPE/NAME... -> (mapping, names, remaining args)."""
        if not args:
            raise Fail("error: You must provide one or more resources by argument or filename.")
        if "/" in args[0]:
            res = self.resolve(args[0].split("/")[0])
            names, rest = [], []
            for a in args:
                (names if "/" in a else rest).append(a.split("/", 1)[-1])
            return res, names, rest
        res = self.resolve(default_kind or args[0])
        rest = args if default_kind else args[1:]
        return res, rest[:1], rest[1:]

    def _obj_path(self, res: tuple, name: str) -> str:
        g, v, _, plural, namespaced = res
        return res_path(g, v, plural, self.ns if namespaced else None, name)

    def _ref(self, res: tuple, name: str) -> str:
        return f"{res[2].lower()}{'.' + res[0] if res[0] else ''}/{name}"

    def cmd_label(self, args: list[str], field: str = "labels", verb: str = "labeled") -> int:
        res, names, changes = self.targets(args)
        if self.flags.get("all") and not names:
            names = [
                o["metadata"]["name"] for o in self.client.get(self._obj_path(res, "").rstrip("/"))["items"]
            ]
        if not names:
            raise Fail(
                "error: one or more resources must be specified as <resource> <name> or <resource>/<name>"
            )
        # with TYPE NAME form, further positionals may be names until the first k=v / k-
        while changes and not ("=" in changes[0] or changes[0].endswith("-")):
            names.append(changes.pop(0))
        if not changes:
            raise Fail(f"error: at least one {field[:-1]} update is required")
        add = dict(c.split("=", 1) for c in changes if "=" in c)
        remove = [c[:-1] for c in changes if "=" not in c and c.endswith("-")]
        for n in names:
            path = self._obj_path(res, n)
            obj = self.client.get(path)
            cur = obj["metadata"].setdefault(field, {}) or {}
            obj["metadata"][field] = cur
            if not self.flags.get("overwrite"):
                clash = [f"'{k}' already has a value ({cur[k]}), and --overwrite is false" for k, v in add.items()
                         if k in cur and cur[k] != v]  # fmt: skip
                if clash:
                    raise Fail("error: " + clash[0])
            before = dict(cur)
            for k in remove:
                if k not in cur:
                    self.out.write(f'{field[:-1]} "{k}" not found.\n')
                cur.pop(k, None)
            cur.update(add)
            if cur == before:
                self.out.write(f"{self._ref(res, n)} not {verb}\n")
                continue
            # as kubectl does: a merge patch of just the changed keys (no resourceVersion), so a
            # kubelet status update between the read and the write is no conflict
            patch = {k: v for k, v in cur.items() if before.get(k) != v} | {
                k: None for k in before if k not in cur
            }
            self.client.call("PATCH", path, {"metadata": {field: patch}}, "application/merge-patch+json")
            msg = verb if add or not remove else "un" + verb
            self.out.write(f"{self._ref(res, n)} {msg}\n")
        return 0

    def cmd_taint(self, args: list[str]) -> int:
        if not args:
            raise Fail("error: at least one taint update is required")
        res, names, specs = self.targets(args)
        if res[3] != "nodes":
            raise Fail(f"error: invalid resource type {args[0]}, only node types are supported")
        if self.flags.get("all") and not names:
            names = [o["metadata"]["name"] for o in self.client.get("/api/v1/nodes")["items"]]
        if not specs:
            raise Fail("error: at least one taint update is required")
        add, remove = [], []
        for s in specs:
            rm = s.endswith("-")
            body = s[:-1] if rm else s
            kv, _, eff = body.partition(":")
            k, _, v = kv.partition("=")
            if eff and eff not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise Fail(f"error: invalid taint effect: {eff}, unsupported taint effect")
            if not rm and not eff:
                raise Fail(f"error: invalid taint spec: {s}, unknown taint spec")
            (remove if rm else add).append({"key": k, "effect": eff, **({"value": v} if v else {})})
        for n in names:
            path = res_path("", "v1", "nodes", name=n)
            node = self.client.get(path)
            taints = [
                t
                for t in node.setdefault("spec", {}).get("taints") or []
                if t["key"] not in CONTROLLER_TAINTS
            ]
            for r in remove:
                keep = [
                    t
                    for t in taints
                    if not (t["key"] == r["key"] and (not r["effect"] or t["effect"] == r["effect"]))
                ]
                if len(keep) == len(taints):
                    raise Fail(
                        f'error: taint "{r["key"]}{":" + r["effect"] if r["effect"] else ""}" not found'
                    )
                taints = keep
            for a in add:
                same = [t for t in taints if t["key"] == a["key"] and t["effect"] == a["effect"]]
                if same and not self.flags.get("overwrite"):
                    raise Fail(
                        f"error: node {n} already has {a['key']} taint(s) with same effect(s) and --overwrite is false"
                    )
                taints = [t for t in taints if t not in same] + [a]
            node["spec"]["taints"] = taints
            self.client.call("PUT", path, node)
            verb = "modified" if add and remove else "tainted" if add else "untainted"
            self.out.write(f"node/{n} {verb}\n")
        return 0

    def _cordon(self, name: str, on: bool) -> None:
        path = res_path("", "v1", "nodes", name=name)
        node = self.client.get(path)
        if bool(node.get("spec", {}).get("unschedulable")) == on:
            self.out.write(f"node/{name} already {'cordoned' if on else 'uncordoned'}\n")
            return
        node.setdefault("spec", {})["unschedulable"] = True if on else None
        if not on:
            node["spec"].pop("unschedulable")
        self.client.call("PUT", path, node)
        self.out.write(f"node/{name} {'cordoned' if on else 'uncordoned'}\n")

    def cmd_cordon(self, args: list[str], on: bool = True) -> int:
        _, names, rest = self.targets(args, "nodes")
        for n in names + rest:
            self._cordon(n, on)
        return 0

    def cmd_drain(self, args: list[str]) -> int:
        _, names, rest = self.targets(args, "nodes")
        for n in names + rest:
            self._cordon(n, True)
            on_node = [
                p
                for p in self.client.get("/api/v1/pods")["items"]
                if (p.get("spec") or {}).get("nodeName") == n
                and "kubernetes.io/config.mirror" not in (p["metadata"].get("annotations") or {})
            ]  # mirror pods are skipped, as kubectl drain does (their static pod stays)
            ds_owned = [
                p
                for p in on_node
                if any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])
            ]
            ds_pods = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in ds_owned]  # fmt: skip
            if ds_pods and not self.flags.get("ignore-daemonsets"):
                msg = f"cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): {', '.join(ds_pods)}"
                sys.stderr.write(f'error: unable to drain node "{n}" due to error:{msg}, continuing command...\n'
                                 f"There are pending nodes to be drained:\n {n}\n{msg}\n")  # fmt: skip
                return 1
            if ds_pods:
                sys.stderr.write(f"WARNING: ignoring DaemonSet-managed Pods: {', '.join(ds_pods)}\n")
            gone = [p for p in on_node if p not in ds_owned]  # DaemonSet pods stay: their controller
            for p in gone:  # would put them back
                ns, pn = p["metadata"]["namespace"], p["metadata"]["name"]
                self.out.write(f"evicting pod {ns}/{pn}\n")
                self.client.call("DELETE", res_path("", "v1", "pods", ns, pn))
                self.out.write(f"pod/{pn} evicted\n")
            pending = wait_deleted(
                self.client, gone, int(self.flags.get("skip-wait-for-delete-timeout") or 0),
                parse_duration(self.flags.get("timeout") or "0"), self.out,
            )  # fmt: skip
            if pending:
                msg = f'error when waiting for pod "{pending}" terminating: global timeout reached: {self.flags["timeout"]}'
                sys.stderr.write(f'error: unable to drain node "{n}" due to error:{msg}, continuing command...\n'
                                 f"There are pending nodes to be drained:\n {n}\n{msg}\n")  # fmt: skip
                return 1
            self.out.write(f"node/{n} drained\n")
        return 0

    def read_manifests(self) -> list[tuple[str, dict | None, str | None]]:
        """(source, object, error) for every document of every -f."""
        out: list[tuple[str, dict | None, str | None]] = []
        files: list[str] = []
        for f in self.flags.get("filename", []):
            if f == "-":
                files.append(f)
            elif os.path.isdir(f):
                files += sorted(
                    os.path.join(f, n) for n in os.listdir(f) if n.endswith((".yaml", ".yml", ".json"))
                )
            elif os.path.exists(f):
                files.append(f)
            else:
                raise Fail(f'error: the path "{f}" does not exist')
        for f in files:
            text = sys.stdin.read() if f == "-" else read_text(f) or ""
            src = "STDIN" if f == "-" else f
            try:
                docs = [d for d in yaml.safe_load_all(text) if d is not None]
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                raise Fail(f'error: error parsing {src}: error converting YAML to JSON: yaml: '
                           f'{"line " + str(mark.line + 1) + ": " if mark else ""}{getattr(e, "problem", e)}') from e  # fmt: skip
            for d in docs:
                if (
                    isinstance(d, dict)
                    and d.get("kind", "").endswith("List")
                    and isinstance(d.get("items"), list)
                ):
                    out += [(src, i, None) for i in d["items"]]
                    continue
                miss = [
                    f"{k} not set" for k in ("apiVersion", "kind") if not isinstance(d, dict) or not d.get(k)
                ]
                if miss:
                    out.append((src, None, f'error validating "{src}": error validating data: [{", ".join(miss)}]; if '
                                "you choose to ignore these errors, turn validation off with --validate=false"))  # fmt: skip
                else:
                    out.append((src, d, None))
        if not out:
            raise Fail("error: no objects passed to apply")
        return out

    def cmd_apply(self, args: list[str]) -> int:
        if not self.flags.get("filename"):
            raise Fail("error: must specify one of -f and -k")
        rc = 0
        for src, obj, err in self.read_manifests():
            if err:
                sys.stderr.write(f"error: {err}\n")
                rc = 1
                continue
            assert obj is not None
            m = self.mapping_for(obj["apiVersion"], obj["kind"])
            if m is None:
                sys.stderr.write(unrecognized(src, obj) + "\n")
                rc = 1
                continue
            g, v, plural, namespaced = m
            md = obj.setdefault("metadata", {}) or {}
            obj["metadata"] = md
            name = md.get("name", "")
            ns = (md.get("namespace") or self.ns) if namespaced else None
            if not name:
                sys.stderr.write(f'error: error when retrieving current configuration of:\nResource: "{g + "/" if g else ""}'
                                 f'{v}, Resource={plural}", GroupVersionKind: "{g + "/" if g else ""}{v}, Kind={obj["kind"]}"\n'
                                 f'Name: "", Namespace: "{ns or ""}"\nfrom server for: "{src}": resource name may not be empty\n')  # fmt: skip
                rc = 1
                continue
            if ns:
                md["namespace"] = ns
            else:
                md.pop("namespace", None)
            manifest = copy.deepcopy(obj)
            md.setdefault("annotations", {})[LAST_APPLIED] = go_json(manifest) + "\n"
            ref = f"{obj['kind'].lower()}{'.' + g if g else ''}/{name}"
            path = res_path(g, v, plural, ns, name)
            try:
                try:
                    cur = self.client.get(path)
                except ApiError as e:
                    if e.code != 404:
                        raise
                    self.client.call("POST", res_path(g, v, plural, ns), obj)
                    self.out.write(f"{ref} created\n")
                    continue
                last = json.loads((cur["metadata"].get("annotations") or {}).get(LAST_APPLIED) or "{}")
                new = three_way(cur, last, obj)
                if new == cur:
                    self.out.write(f"{ref} unchanged\n")
                    continue
                self.client.call("PUT", path, new)
                self.out.write(f"{ref} configured\n")
            except ApiError as e:
                op = "creating" if e.code == 404 else "applying patch"
                sys.stderr.write(f'Error from server ({e.reason}): error when {op} "{src}": {e.message}\n')
                rc = 1
            finally:
                for w in self.client.warnings:
                    sys.stderr.write(f"Warning: {w}\n")
                self.client.warnings.clear()
        return rc

    def cmd_delete(self, args: list[str]) -> int:
        items: list[tuple[tuple, str, str | None]] = []
        if self.flags.get("filename"):
            for src, obj, err in self.read_manifests():
                if err or obj is None:
                    raise Fail(f"error: {err}")
                m = self.mapping_for(obj["apiVersion"], obj["kind"])
                if m is None:
                    raise Fail(unrecognized(src, obj))
                res = (m[0], m[1], obj["kind"], m[2], m[3])
                items.append((res, obj["metadata"]["name"], obj["metadata"].get("namespace") or self.ns))
        else:
            res, names, rest = self.targets(args)
            items = [(res, n, self.ns) for n in names + rest]
        rc = 0
        for res, n, ns in items:
            g, v, kind, plural, namespaced = res
            try:
                self.client.call("DELETE", res_path(g, v, plural, ns if namespaced else None, n))
                self.out.write(f'{kind.lower()}{"." + g if g else ""} "{n}" deleted\n')
            except ApiError as e:
                if e.code == 404 and self.flags.get("ignore-not-found"):
                    continue
                raise
        return rc

    def cmd_create(self, args: list[str]) -> int:
        if self.flags.get("filename"):
            for src, obj, err in self.read_manifests():
                if err or obj is None:
                    raise Fail(f"error: {err}")
                m = self.mapping_for(obj["apiVersion"], obj["kind"])
                if m is None:
                    raise Fail(unrecognized(src, obj))
                ns = (obj["metadata"].get("namespace") or self.ns) if m[3] else None
                try:
                    self.client.call("POST", res_path(m[0], m[1], m[2], ns), obj)
                except ApiError as e:
                    raise ApiError(e.code, e.reason, f'error when creating "{src}": {e.message}') from e
                self.out.write(
                    f"{obj['kind'].lower()}{'.' + m[0] if m[0] else ''}/{obj['metadata']['name']} created\n"
                )
            return 0
        if len(args) >= 2 and args[0] in ("namespace", "ns"):
            self.client.call(
                "POST",
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": args[1]}},
            )
            self.out.write(f"namespace/{args[1]} created\n")
            return 0
        raise Fail(f"error: standin: kubectl create {' '.join(args[:1])} is not supported")

    def cmd_wait(self, args: list[str]) -> int:
        cond = self.flags.get("for", "")
        if not cond:
            raise Fail("error: --for must be set")
        timeout = parse_duration(self.flags.get("timeout", "30s"))
        if "/" in (args[0] if args else ""):
            res, names, _ = self.targets(args)
        else:
            res, names, rest = self.targets(args)
            names += rest
        g, v, kind, plural, namespaced = res
        ns = self.ns if namespaced else None
        if self.flags.get("all") or not names:
            names = [o["metadata"]["name"] for o in self.client.get(res_path(g, v, plural, ns))["items"]]
            if not names:
                raise Fail("error: no matching resources found")
        want_type, want_status = "", "true"
        if cond.startswith("condition="):
            want_type, _, want_status = cond[len("condition=") :].partition("=")
            want_status = (want_status or "true").lower()
        elif cond != "delete":
            raise Fail(f'error: unrecognized condition: "{cond}"')
        end = now() + timeout
        for n in names:
            while True:
                try:
                    obj = self.client.get(res_path(g, v, plural, ns, n))
                    if want_type and any(c.get("type", "").lower() == want_type.lower() and str(c.get("status")).lower()
                                         == want_status for c in (obj.get("status") or {}).get("conditions") or []):  # fmt: skip
                        self.out.write(f"{kind.lower()}{'.' + g if g else ''}/{n} condition met\n")
                        break
                except ApiError as e:
                    if e.code != 404:
                        raise
                    if cond == "delete":
                        self.out.write(f"{kind.lower()}{'.' + g if g else ''}/{n} condition met\n")
                        break
                if now() >= end:
                    raise Fail(f"error: timed out waiting for the condition on {qualified(plural, g)}/{n}")
                time.sleep(1)
        return 0

    def cmd_version(self, args: list[str]) -> int:
        info = version_info()
        fmt = self.flags.get("output", "")
        server = None
        if not self.flags.get("client"):
            try:
                server = self.client.get("/version")
            except (Unreachable, ApiError):
                server = None
        if fmt == "json":
            doc = {"clientVersion": info, **({"serverVersion": server} if server else {})}
            self.out.write(json.dumps(doc, indent=2) + "\n")
        elif fmt == "yaml":
            self.out.write(
                yaml.safe_dump({"clientVersion": info, **({"serverVersion": server} if server else {})})
            )
        elif self.flags.get("short"):
            self.out.write(
                f"Client Version: {VERSION}\n"
                + (f"Server Version: {server['gitVersion']}\n" if server else "")
            )
        else:

            def go(d):
                return (
                    "version.Info{" + ", ".join(f'{k[0].upper() + k[1:]}:"{v}"' for k, v in d.items()) + "}"
                )

            self.out.write(
                f"Client Version: {go(info)}\n" + (f"Server Version: {go(server)}\n" if server else "")
            )
        if not self.flags.get("client") and server is None:
            self.client.get("/version")  # raises the connection error like kubectl does
        return 0

    def cmd_cluster_info(self, args: list[str]) -> int:
        self.client.get("/version")
        self.out.write(
            f"\x1b[0;32mKubernetes control plane\x1b[0m is running at \x1b[0;33m{self.client.creds.server}\x1b[0m\n"
        )
        self.out.write("\nTo further debug and diagnose cluster problems, use 'kubectl cluster-info dump'.\n")
        return 0


def three_way(cur: Any, last: Any, new: Any) -> Any:
    """kubectl apply's 3-way merge, simplified: fields in `new` win, fields dropped since `last` go, others stay."""
    if not (isinstance(cur, dict) and isinstance(new, dict)):
        return copy.deepcopy(new)
    out = copy.deepcopy(cur)
    last = last if isinstance(last, dict) else {}
    for k, v in new.items():
        out[k] = three_way(out.get(k), last.get(k), v) if isinstance(v, dict) else copy.deepcopy(v)
    for k in last:
        if k not in new:
            out.pop(k, None)
    return out


def kubectl_main(argv: list[str]) -> int:
    try:
        flags, pos = parse_flags(argv, KUBECTL_FLAGS, KUBECTL_SHORT)
    except Fail as e:
        sub = next((a for a in argv if not a.startswith("-")), "")
        sys.stderr.write(f"Error: {e.message}\nSee 'kubectl {sub + ' ' if sub else ''}--help' for usage.\n")
        return 1
    if not pos:
        print("kubectl controls the Kubernetes cluster manager (TEST-ONLY stand-in).")
        return 0
    sub, args = pos[0], pos[1:]
    if sub == "version" and flags.get("client"):
        return Kubectl.cmd_version(_client_only(flags), args)
    if sub == "completion":
        return completion(args)
    k = Kubectl(flags)
    table: dict[str, Callable[[list[str]], int]] = {
        "get": k.cmd_get, "label": k.cmd_label, "annotate": lambda a: k.cmd_label(a, "annotations", "annotated"),
        "taint": k.cmd_taint, "cordon": k.cmd_cordon, "uncordon": lambda a: k.cmd_cordon(a, False),
        "drain": k.cmd_drain, "apply": k.cmd_apply, "delete": k.cmd_delete, "create": k.cmd_create,
        "wait": k.cmd_wait, "version": k.cmd_version, "cluster-info": k.cmd_cluster_info,
    }  # fmt: skip
    if sub not in table:
        sys.stderr.write(f'Error: unknown command "{sub}" for "kubectl"\nRun \'kubectl --help\' for usage.\n')
        return 1
    try:
        return table[sub](args)
    except Unreachable as e:
        if e.refused:
            sys.stderr.write(
                f"The connection to the server {e.hostport} was refused - did you specify the right host or port?\n"
            )
        else:
            sys.stderr.write(f"Unable to connect to the server: {e.reason}\n")
        return 1
    except ApiError as e:
        if e.code == 401:
            sys.stderr.write("error: You must be logged in to the server (Unauthorized)\n")
        else:
            sys.stderr.write(f"Error from server ({e.reason}): {e.message}\n")
        return 1
    finally:
        for w in k.client.warnings:
            sys.stderr.write(f"Warning: {w}\n")


SUBCOMMANDS = ("annotate", "apply", "cluster-info", "completion", "cordon", "create", "delete", "drain", "get",
               "label", "taint", "uncordon", "version", "wait")  # fmt: skip


def completion(args: list[str]) -> int:
    """`kubectl completion bash|zsh`: kubectl's refusals; a script completing the stand-in's own
    subcommands (the real one is cobra's generated script, thousands of lines)."""
    if not args:
        sys.stderr.write("error: Shell not specified.\nSee 'kubectl completion -h' for help and examples\n")
        return 1
    if len(args) > 1:
        sys.stderr.write("error: Too many arguments. Expected only the shell type.\n"
                         "See 'kubectl completion -h' for help and examples\n")  # fmt: skip
        return 1
    if args[0] not in ("bash", "zsh", "fish", "powershell"):
        sys.stderr.write(f'error: Unsupported shell type "{args[0]}".\n')
        return 1
    words = " ".join(SUBCOMMANDS)
    sys.stdout.write(
        "# bash completion for kubectl (TEST-ONLY stand-in: its subcommands)\n"
        "__kubectl_standin_complete() {\n"
        '    local cur="${COMP_WORDS[COMP_CWORD]}"\n'
        '    if [ "$COMP_CWORD" -eq 1 ]; then\n'
        f'        COMPREPLY=( $(compgen -W "{words}" -- "$cur") )\n'
        "    fi\n"
        "}\n"
        "complete -o default -F __kubectl_standin_complete kubectl\n"
    )
    return 0


def _client_only(flags: dict[str, Any]) -> Kubectl:
    k = Kubectl.__new__(Kubectl)
    k.flags, k.out = flags, sys.stdout
    return k
