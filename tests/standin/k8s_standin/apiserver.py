"""The API server stand-in: a small REST store over JSON files, with authn/authz like the real one."""

from __future__ import annotations

import base64
import contextlib
import copy
import http.client
import http.server
import ipaddress
import json
import re
import socket
import ssl
import threading
import urllib.parse
import uuid
from typing import Any

from . import controllers, kubeletapi, serverside, validation
from .client import ApiError, not_found
from .etcdstore import EtcdClient, Store
from .pki import TOKEN_RE, csr_subject, jws_detached, secret_data, sign_csr, token_expired
from .util import (
    BUILD_DATE,
    CONTROLLER_TAINTS,
    DOCKERSHIM_REMOVED,
    GIT_COMMIT,
    GO_VERSION,
    MINOR,
    NODE_MONITOR_GRACE,
    VERSION,
    Fail,
    b64,
    now,
    parse_rfc3339,
    rfc3339,
)

# --------------------------------------------------------------------------- API resources

# (group, version, kind, plural, namespaced, shortNames, deprecation warning)
BUILTIN_RESOURCES: list[tuple[str, str, str, str, bool, list[str], str]] = [
    ("", "v1", "Namespace", "namespaces", False, ["ns"], ""),
    ("", "v1", "Node", "nodes", False, ["no"], ""),
    ("", "v1", "ServiceAccount", "serviceaccounts", True, ["sa"], ""),
    ("", "v1", "ConfigMap", "configmaps", True, ["cm"], ""),
    ("", "v1", "Secret", "secrets", True, [], ""),
    ("", "v1", "Service", "services", True, ["svc"], ""),
    ("", "v1", "Pod", "pods", True, ["po"], ""),
    ("", "v1", "Endpoints", "endpoints", True, ["ep"], ""),
    ("", "v1", "Event", "events", True, ["ev"], ""),
    ("", "v1", "PersistentVolume", "persistentvolumes", False, ["pv"], ""),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ["pvc"], ""),
    ("", "v1", "LimitRange", "limitranges", True, ["limits"], ""),
    ("", "v1", "ResourceQuota", "resourcequotas", True, ["quota"], ""),
    ("apps", "v1", "Deployment", "deployments", True, ["deploy"], ""),
    ("apps", "v1", "DaemonSet", "daemonsets", True, ["ds"], ""),
    ("apps", "v1", "StatefulSet", "statefulsets", True, ["sts"], ""),
    ("apps", "v1", "ReplicaSet", "replicasets", True, ["rs"], ""),
    ("batch", "v1", "Job", "jobs", True, [], ""),
    ("batch", "v1", "CronJob", "cronjobs", True, ["cj"], ""),
    ("batch", "v1beta1", "CronJob", "cronjobs", True, ["cj"],
     "batch/v1beta1 CronJob is deprecated in v1.21+, unavailable in v1.25+; use batch/v1 CronJob"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False, [], ""),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False, [], ""),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", True, [], ""),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True, [], ""),
    ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, ["pdb"], ""),
    ("policy", "v1beta1", "PodDisruptionBudget", "poddisruptionbudgets", True, ["pdb"],
     "policy/v1beta1 PodDisruptionBudget is deprecated in v1.21+, unavailable in v1.25+; "
     "use policy/v1 PodDisruptionBudget"),
    ("policy", "v1beta1", "PodSecurityPolicy", "podsecuritypolicies", False, ["psp"],
     "policy/v1beta1 PodSecurityPolicy is deprecated in v1.21+, unavailable in v1.25+"),
    ("networking.k8s.io", "v1", "Ingress", "ingresses", True, ["ing"], ""),
    ("networking.k8s.io", "v1", "IngressClass", "ingressclasses", False, [], ""),
    ("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True, ["netpol"], ""),
    ("storage.k8s.io", "v1", "StorageClass", "storageclasses", False, ["sc"], ""),
    ("storage.k8s.io", "v1", "CSIDriver", "csidrivers", False, [], ""),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False,
     ["crd", "crds"], ""),
    ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration",
     "mutatingwebhookconfigurations", False, [], ""),
    ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
     "validatingwebhookconfigurations", False, [], ""),
    ("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ["pc"], ""),
    ("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False, [], ""),
    ("coordination.k8s.io", "v1", "Lease", "leases", True, [], ""),
    ("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests", False,
     ["csr"], ""),
    ("apiregistration.k8s.io", "v1", "APIService", "apiservices", False, [], ""),
]  # fmt: skip
# what this server serves itself, by (group, plural): the etcd keys of the rest carry their group
BUILTIN = frozenset((r[0], r[3]) for r in BUILTIN_RESOURCES)


def res_path(group: str, version: str, plural: str, ns: str | None = None, name: str | None = None) -> str:
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if ns:
        base += f"/namespaces/{ns}"
    base += f"/{plural}"
    return base + (f"/{urllib.parse.quote(name, safe='')}" if name else "")


def qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


# --------------------------------------------------------------------------- API server (stand-in)


class ApiServer:
    """The stand-in kube-apiserver: REST subset + authn (x509 / bootstrap tokens) + node lifecycle."""

    def __init__(self, etcd: EtcdClient, ca_cert: str, ca_key: str) -> None:
        self.store = Store(etcd, BUILTIN)
        self.ca_cert = ca_cert
        self.ca_key = ca_key
        self.cluster_cidr = ""
        self.next_cidr = 0  # cidr_set.go's nextCandidate
        self.git_version = VERSION  # /version: the image tag of the manifest it runs from (kubelet.py)
        self.kubelet_client: tuple[str, str] | None = None  # --kubelet-client-certificate and -key

    def next_pod_cidr(self) -> str:
        """kube-controller-manager --allocate-node-cidrs: the next free /24 of --cluster-cidr after
        the last one given, wrapping around (kubernetes/kubernetes pkg/controller/nodeipam/ipam/
        cidrset/cidr_set.go AllocateNext, read at 0be333dd): a node deleted and joined again gets a
        new range, not its old one, until the controller restarts (its cursor starts at 0)."""
        used = {n.get("spec", {}).get("podCIDR") for n in self.store.items("", "nodes")}
        net = ipaddress.ip_network(self.cluster_cidr.split(",")[0], strict=False)
        subs = list(net.subnets(new_prefix=max(24, net.prefixlen)))
        for i in range(len(subs)):
            k = (self.next_cidr + i) % len(subs)
            if str(subs[k]) not in used:
                self.next_cidr = (k + 1) % len(subs)
                return str(subs[k])
        raise ApiError(
            500, "InternalError", "CIDR allocation failed; there are no remaining CIDRs left to allocate"
        )

    # ---- discovery
    def resources(self) -> list[tuple[str, str, str, str, bool, list[str], str]]:
        out = list(BUILTIN_RESOURCES)
        for crd in self.store.view("apiextensions.k8s.io", "customresourcedefinitions"):
            spec = crd.get("spec") or {}
            names = spec.get("names") or {}
            for v in spec.get("versions") or []:
                if v.get("served", True):
                    out.append((spec.get("group", ""), v.get("name", ""), names.get("kind", ""),
                                names.get("plural", ""), spec.get("scope") == "Namespaced",
                                list(names.get("shortNames") or []), ""))  # fmt: skip
        return out

    def find(self, group: str, version: str, plural: str) -> tuple[str, str, str, str, bool, list[str], str]:
        for r in self.resources():
            if r[0] == group and r[1] == version and r[3] == plural:
                return r
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def discovery(self, parts: list[str]) -> dict | None:
        res = self.resources()
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if parts == ["apis"]:
            groups: dict[str, list[str]] = {}
            for r in res:
                if r[0] and r[1] not in groups.setdefault(r[0], []):
                    groups[r[0]].append(r[1])
            items = []
            for g, vs in groups.items():
                vers = [{"groupVersion": f"{g}/{v}", "version": v} for v in vs]
                items.append({"name": g, "versions": vers, "preferredVersion": vers[0]})
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": items}
        gv = None
        if len(parts) == 2 and parts[0] == "api":
            gv = ("", parts[1])
        elif len(parts) == 3 and parts[0] == "apis":
            gv = (parts[1], parts[2])
        if gv is None:
            return None
        lst = [
            {"name": r[3], "singularName": "", "namespaced": r[4], "kind": r[2], "shortNames": r[5],
             "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}
            for r in res if (r[0], r[1]) == gv
        ]  # fmt: skip
        if gv == ("", "v1"):  # kubectl drain evicts when the server lists this subresource
            lst.append({"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy",
                        "version": "v1", "kind": "Eviction", "verbs": ["create"]})  # fmt: skip
            lst.append(
                {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]}
            )
        if not lst:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{gv[0]}/{gv[1]}" if gv[0] else gv[1], "resources": lst}  # fmt: skip

    # ---- authentication / authorization
    def authenticate(self, peer: dict | None, authz: str | None) -> tuple[str, list[str]]:
        if authz:
            m = TOKEN_RE.match(authz.removeprefix("Bearer ").strip())
            if not m:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            sec = self.store.objects.get(
                Store.key("", "secrets", "kube-system", f"bootstrap-token-{m.group(1)}")
            )
            d = secret_data(sec) if sec else {}
            if (not sec or d.get("token-secret") != m.group(2) or token_expired(sec)
                    or d.get("usage-bootstrap-authentication") != "true"):  # fmt: skip
                raise ApiError(401, "Unauthorized", "Unauthorized")
            extra = [g for g in d.get("auth-extra-groups", "").split(",") if g]
            return f"system:bootstrap:{m.group(1)}", ["system:bootstrappers", *extra, "system:authenticated"]
        if peer:
            cn, orgs = "", []
            for rdn in peer.get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        cn = v
                    elif k == "organizationName":
                        orgs.append(v)
            return cn, [*orgs, "system:authenticated"]
        return "system:anonymous", ["system:unauthenticated"]

    @staticmethod
    def authorize(
        user: str, groups: list[str], verb: str, group: str, plural: str, ns: str, name: str
    ) -> bool:
        if "system:masters" in groups or user in ("system:kube-controller-manager", "system:kube-scheduler"):
            return True
        public_ci = (
            plural == "configmaps" and ns == "kube-public" and name == "cluster-info" and verb == "get"
        )
        if public_ci:  # kubeadm's RBAC: cluster-info is readable by anonymous
            return True
        joining = "system:bootstrappers" in groups or "system:nodes" in groups
        if joining and plural == "configmaps" and ns == "kube-system" and verb == "get":
            return name in ("kubeadm-config", "kube-proxy", *KUBELET_CONFIG_NAMES)
        if joining and plural == "certificatesigningrequests" and verb in ("create", "get"):
            return True
        if "system:bootstrappers" in groups and plural == "nodes" and verb == "get":
            return True  # kubeadm:get-nodes
        if "system:nodes" in groups and plural == "nodes":
            own = user == f"system:node:{name}"
            return verb in ("get", "list", "watch") or (own and verb in ("create", "update", "patch"))
        return False

    # ---- node lifecycle controller, evaluated on read
    @staticmethod
    def lifecycle(node: dict) -> dict:
        st = node.setdefault("status", {})
        conds = st.get("conditions") or []
        hb = max(
            (parse_rfc3339(c["lastHeartbeatTime"]) for c in conds if c.get("lastHeartbeatTime")), default=0
        )
        if conds and now() - hb > NODE_MONITOR_GRACE:
            for c in conds:
                if c.get("status") != "Unknown":
                    c.update({"status": "Unknown", "reason": "NodeStatusUnknown",
                              "message": "Kubelet stopped posting node status.", "lastTransitionTime": rfc3339()})  # fmt: skip
        ready = next((c.get("status") for c in conds if c.get("type") == "Ready"), None)
        spec = node.setdefault("spec", {})
        taints = [t for t in spec.get("taints") or [] if t.get("key") not in CONTROLLER_TAINTS]
        if ready == "Unknown":
            taints += [
                {"key": "node.kubernetes.io/unreachable", "effect": e} for e in ("NoSchedule", "NoExecute")
            ]
        elif ready != "True":
            taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
        if spec.get("unschedulable"):
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        seen: set[tuple[str, str]] = set()
        spec["taints"] = [
            t for t in taints if (t["key"], t["effect"]) not in seen and not seen.add((t["key"], t["effect"]))
        ]
        if not spec["taints"]:
            del spec["taints"]
        return node

    def cluster_info(self, cm: dict) -> dict:
        """The bootstrap signer: one jws-kubeconfig-<id> per valid signing token."""
        data = cm.setdefault("data", {})
        for k in [k for k in data if k.startswith("jws-kubeconfig-")]:
            del data[k]
        for sec in self.store.items("", "secrets", "kube-system"):
            d = secret_data(sec)
            if sec.get("type") == "bootstrap.kubernetes.io/token" and d.get("usage-bootstrap-signing") == "true" \
                    and not token_expired(sec):  # fmt: skip
                data[f"jws-kubeconfig-{d['token-id']}"] = jws_detached(data.get("kubeconfig", ""), d["token-id"],
                                                                       d["token-secret"])  # fmt: skip
        return cm

    def purge_expired_tokens(self) -> None:
        """The token cleaner controller."""
        for sec in self.store.items("", "secrets", "kube-system"):
            if sec.get("type") == "bootstrap.kubernetes.io/token" and token_expired(sec):
                self.store.delete(Store.key("", "secrets", "kube-system", sec["metadata"]["name"]))

    def sign_node_csr(self, obj: dict, user: str, groups: list[str]) -> None:
        """csrapprover + csrsigner for kubelet client certificates."""
        pem = base64.b64decode(obj["spec"]["request"]).decode()
        cn, orgs = csr_subject(pem)
        if not cn.startswith("system:node:") or orgs != ["system:nodes"]:
            raise ApiError(
                403, "Forbidden", f"standin: only kubelet client CSRs are signed, got CN={cn} O={orgs}"
            )
        if "system:nodes" in groups and user != cn:
            raise ApiError(403, "Forbidden", f'{user} cannot request a certificate for "{cn}"')
        cert = sign_csr(pem, self.ca_cert, self.ca_key, client=True)
        obj["spec"].update({"username": user, "groups": groups})
        obj["status"] = {
            "certificate": b64(cert),
            "conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved",
                            "message": "Auto approving kubelet client certificate after SubjectAccessReview."}],
        }  # fmt: skip

    def _node_authorizer(
        self, user: str, groups: list[str], verb: str, plural: str, ns: str, name: str
    ) -> bool:
        """A kubelet reads and updates the pods bound to it, reads the ConfigMaps they mount, and
        records events."""
        if "system:nodes" not in groups or not user.startswith("system:node:"):
            return False
        node = user.removeprefix("system:node:")
        if plural == "pods":  # create/delete: mirror pods only (NodeRestriction, in _create/handle)
            return verb in ("get", "list", "watch", "update", "patch", "create", "delete")
        if plural == "events":  # NodeRules in plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go
            return verb in ("create", "update", "patch")
        if plural == "configmaps" and verb == "get":
            return any(
                (v.get("configMap") or {}).get("name") == name
                for pod in self.store.items("", "pods", ns)
                if (pod.get("spec") or {}).get("nodeName") == node
                for v in (pod.get("spec") or {}).get("volumes") or []
            )
        return False

    def _reconcile_if(self, plural: str, before: dict | None, after: dict | None) -> None:
        """Run the DaemonSet and Job controllers and Volcano's scheduler when their answers can change."""

        def view(o: dict | None) -> Any:
            return (
                None
                if o is None
                else ((o.get("metadata") or {}).get("labels"), (o.get("spec") or {}).get("taints"))
            )

        if plural == "daemonsets" or (plural == "nodes" and view(before) != view(after)):
            controllers.reconcile_daemonsets(self.store, Store.key)

        def owned_by_job(o: dict | None) -> bool:
            return o is not None and any(
                r.get("kind") == "Job" for r in o["metadata"].get("ownerReferences") or []
            )

        def unbound_volcano(o: dict | None) -> bool:
            spec = (o or {}).get("spec") or {}
            return spec.get("schedulerName") == controllers.VOLCANO and not spec.get("nodeName")

        def offer(o: dict | None) -> Any:  # what else of a node decides where a pod may go
            if o is None:
                return None
            st = o.get("status") or {}
            ready = [c.get("status") for c in st.get("conditions") or [] if c.get("type") == "Ready"]
            return (o.get("spec") or {}).get("unschedulable"), st.get("allocatable"), ready

        made = False  # a Job's new pod waits for its scheduler
        if plural == "jobs" or (plural == "pods" and (owned_by_job(before) or owned_by_job(after))):
            made = controllers.reconcile_jobs(self.store, Store.key)
        nodes_changed = plural == "nodes" and (view(before), offer(before)) != (view(after), offer(after))
        if (
            made
            or nodes_changed
            or plural in ("jobs", "queues", "customresourcedefinitions")
            or (plural == "pods" and unbound_volcano(after))
        ):
            controllers.schedule_volcano(self.store, Store.key, self.lifecycle)

    # ---- request handling
    def _authorize_or_raise(
        self,
        user: str,
        groups: list[str],
        verb: str,
        group: str,
        plural: str,
        ns: str,
        name: str,
        authz_name: str,
    ) -> None:
        if not (self.authorize(user, groups, verb, group, plural, ns, authz_name)
                or self._node_authorizer(user, groups, verb, plural, ns, authz_name)):  # fmt: skip
            if user == "system:anonymous":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
            what = f'resource "{plural}" in API group "{group}" {scope}'
            raise ApiError(
                403,
                "Forbidden",
                f'{qualified(plural, group)}{" " + repr(name).replace(chr(39), chr(34)) if name else ""} is forbidden: User "{user}" cannot {verb} {what}',
            )

    def _list(
        self, r: tuple, group: str, version: str, plural: str, ns: str, query: dict[str, str], warn: list[str]
    ) -> tuple[int, Any, list[str]]:
        items = self.store.items(group, plural, ns or None)
        if plural == "nodes":
            items = [self.lifecycle(n) for n in items]
        sel = query.get("labelSelector", "")
        items = [i for i in items if match_selector(sel, (i.get("metadata") or {}).get("labels") or {})]
        for term in [
            t for t in query.get("fieldSelector", "").split(",") if t
        ]:  # spec.nodeName=X, metadata.name=X
            path, _, want = term.partition("=")
            first, _, second = path.partition(".")
            items = [i for i in items if str((i.get(first) or {}).get(second, "")) == want]
        kind = r[2] + "List"
        return 200, {"kind": kind, "apiVersion": f"{group}/{version}" if group else version,
                     "metadata": {"resourceVersion": str(self.store.rv)}, "items": items}, warn  # fmt: skip

    def _delete(
        self, key: str, cur: Any, qn: str, name: str, plural: str, warn: list[str], graceful: bool = False
    ) -> tuple[int, Any, list[str]]:
        """graceful: a delete the pod's kubelet confirms (not one by the kubelet, nor with grace 0)."""
        if cur is None:
            raise not_found(qn, name)
        if plural == "pods" and graceful and (kept := self._terminating_if_kubelet_silent(key, cur)):
            return 200, kept, warn
        self.store.delete(key)
        if plural == "namespaces":
            for k in [k for k in self.store.objects if k.split("|")[2] == name]:
                self.store.delete(k)
        if plural == "nodes":  # the pod garbage collector: pods bound to a node that is gone
            for k, p in list(self.store.objects.items()):
                if k.startswith("|pods|") and (p.get("spec") or {}).get("nodeName") == name:
                    self.store.delete(k)
        return 200, cur, warn

    def _create(
        self,
        obj: dict,
        r: tuple,
        group: str,
        version: str,
        plural: str,
        ns: str,
        qn: str,
        user: str,
        groups: list[str],
        warn: list[str],
    ) -> tuple[int, Any, list[str]]:
        name = (obj.get("metadata") or {}).get("name", "")
        if not name:
            raise ApiError(
                422,
                "Invalid",
                f'{r[2]} "" is invalid: metadata.name: Required value: name or generateName is required',
            )
        if ns and Store.key("", "namespaces", "", ns) not in self.store.objects:
            raise not_found("namespaces", ns)
        key = Store.key(group, plural, ns, name)
        if key in self.store.objects:
            raise ApiError(409, "AlreadyExists", f'{qn} "{name}" already exists',
                           {"name": name, "kind": plural})  # fmt: skip
        obj.setdefault("metadata", {})["name"] = name
        if ns:
            obj["metadata"]["namespace"] = ns
        obj.setdefault("apiVersion", f"{group}/{version}" if group else version)
        obj.setdefault("kind", r[2])
        validation.validate(r[2], group, obj)
        if plural == "pods" and user.startswith("system:node:") and "system:nodes" in groups:
            node_restriction(obj, user.removeprefix("system:node:"), name)
        if plural == "certificatesigningrequests":
            self.sign_node_csr(obj, user, groups)
        if plural == "nodes" and self.cluster_cidr and not obj.get("spec", {}).get("podCIDR"):
            obj.setdefault("spec", {})["podCIDR"] = self.next_pod_cidr()
            obj["spec"]["podCIDRs"] = [obj["spec"]["podCIDR"]]
        if (group, plural) == controllers.JOB_API and not (obj.get("spec") or {}).get("manualSelector"):
            # the Job strategy's generateSelector (pkg/registry/batch/job/strategy.go): what
            # `kubectl logs job/NAME` selects the Job's pod by
            uid = obj["metadata"].setdefault("uid", str(uuid.uuid4()))
            spec = obj.setdefault("spec", {})
            spec["selector"] = {"matchLabels": {"controller-uid": uid}}
            tpl_meta = spec.setdefault("template", {}).setdefault("metadata", {})
            tpl_meta["labels"] = {**(tpl_meta.get("labels") or {}), "controller-uid": uid, "job-name": name}
        return 201, self.store.put(key, obj), warn

    def handle(self, method: str, path: str, query: dict[str, str], body: bytes, peer: dict | None,
               authz: str | None, ctype: str = "") -> tuple[int, Any, list[str]]:  # fmt: skip
        if path in ("/healthz", "/livez", "/readyz"):
            return 200, "ok", []
        if path == "/version":
            return 200, version_info(self.git_version), []
        user, groups = self.authenticate(peer, authz)
        if path == "/openapi/v2" and user != "system:anonymous":
            return 200, serverside.openapi_v2(self.git_version), []
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/") if p]
        disc = self.discovery(parts)
        if disc is not None:
            if user == "system:anonymous":
                msg = f'forbidden: User "system:anonymous" cannot get path "{path}"'
                raise ApiError(403, "Forbidden", msg)
            return 200, disc, []
        if parts[:1] == ["api"] and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        r = self.find(group, version, rest[0])
        plural, namespaced, warn = r[3], r[4], [r[6]] if r[6] else []
        name, sub = [*rest[1:3], "", ""][:2]
        if namespaced != bool(ns) and not (namespaced and not ns and method == "GET" and not name):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}.get(method, "")  # fmt: skip
        authz_name = name
        if method == "POST" and not name:  # creates are authorized on the name in the body
            with contextlib.suppress(ValueError, AttributeError):
                authz_name = (json.loads(body or b"{}").get("metadata") or {}).get("name", "")
        self._authorize_or_raise(user, groups, verb, group, plural, ns, name, authz_name)
        qn = qualified(plural, group)
        if plural == "pods" and sub == "log" and method == "GET":
            return self._pod_log(ns, name, query, qn)
        with self.store.lock:
            self.purge_expired_tokens()
            if plural == "pods" and sub == "eviction" and method == "POST":
                return self._evict(ns, name, qn, warn)
            if method == "GET" and not name:
                return self._list(r, group, version, plural, ns, query, warn)
            key = Store.key(group, plural, ns, name)
            cur = copy.deepcopy(self.store.objects.get(key))
            if method == "GET":
                if cur is None:
                    raise not_found(qn, name)
                if plural == "nodes":
                    cur = self.lifecycle(cur)
                if plural == "configmaps" and ns == "kube-public" and name == "cluster-info":
                    cur = self.cluster_info(cur)
                return 200, cur, warn
            if method == "DELETE":
                if (
                    plural == "pods"
                    and cur is not None
                    and "system:nodes" in groups
                    and user.startswith("system:node:")
                ):
                    node = user.removeprefix("system:node:")
                    if (cur.get("spec") or {}).get("nodeName") != node:
                        raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: node "{node}" can only delete '
                                       "pods with spec.nodeName set to itself")  # fmt: skip
                graceful = query.get("gracePeriodSeconds") != "0" and not user.startswith("system:node:")
                res = self._delete(key, cur, qn, name, plural, warn, graceful)
                self._reconcile_if(plural, cur, None)
                return res
            try:
                obj = json.loads(body or b"{}")
            except ValueError as e:
                raise ApiError(400, "BadRequest", f"error decoding body: {e}") from e
            if method == "POST":
                res = self._create(obj, r, group, version, plural, ns, qn, user, groups, warn)
                self._reconcile_if(plural, None, res[1])
                return res
            return self._update(method, obj, cur, key, r, group, plural, qn, name, sub, warn, ctype)

    def _pod_log(self, ns: str, name: str, query: dict[str, str], qn: str) -> tuple[int, Any, list[str]]:
        """GET pods/NAME/log, from the node's kubelet (kubeletapi.py)."""
        with self.store.lock:
            pod = copy.deepcopy(self.store.objects.get(Store.key("", "pods", ns, name)))
            if pod is None:
                raise not_found(qn, name)
            node = self.store.objects.get(Store.key("", "nodes", "", pod["spec"].get("nodeName") or ""))
        return 200, kubeletapi.fetch_log(pod, copy.deepcopy(node), query, self.kubelet_client), []

    def _terminating_if_kubelet_silent(self, key: str, pod: dict) -> dict | None:
        """A graceful delete of a pod whose node's kubelet is silent (Ready Unknown) only marks it
        Terminating: the kubelet confirms a delete, so it stays until the kubelet is back, the pod
        is deleted with grace 0, or its Node object is deleted (the pod GC). None: delete it now."""
        node = self.store.objects.get(Store.key("", "nodes", "", (pod.get("spec") or {}).get("nodeName", "")))
        conds = (self.lifecycle(copy.deepcopy(node))["status"].get("conditions") or []) if node else []
        if not any(c.get("type") == "Ready" and c.get("status") == "Unknown" for c in conds):
            return None
        md = pod["metadata"]
        if not md.get("deletionTimestamp"):
            grace = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            md.update(deletionTimestamp=rfc3339(now() + grace), deletionGracePeriodSeconds=grace)
            return self.store.put(key, pod)
        return pod

    def _evict(self, ns: str, name: str, qn: str, warn: list[str]) -> tuple[int, Any, list[str]]:
        """POST pods/NAME/eviction (policy/v1 or v1beta1 Eviction): a delete a budget may refuse."""
        key = Store.key("", "pods", ns, name)
        pod = self.store.objects.get(key)
        if pod is None:
            raise not_found(qn, name)
        serverside.check_eviction(
            pod, self.store.items("", "pods", ns), self.store.items("policy", "poddisruptionbudgets", ns)
        )
        if self._terminating_if_kubelet_silent(key, pod) is None:
            self.store.delete(key)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}, warn

    def _update(self, method: str, obj: dict, cur: dict | None, key: str, r: tuple, group: str, plural: str,
                qn: str, name: str, sub: str, warn: list[str], ctype: str = "") -> tuple[int, Any, list[str]]:  # fmt: skip
        """PUT (whole object, or its status) and PATCH (JSON merge patch), validated, stored."""
        if cur is None:
            raise not_found(qn, name)
        if method == "PUT":
            want_rv = (obj.get("metadata") or {}).get("resourceVersion")
            if want_rv and want_rv != cur["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qn} "{name}": the object has '
                               "been modified; please apply your changes to the latest version and try again")  # fmt: skip
            new = obj
            if sub == "status":
                new = dict(cur, status=obj.get("status", {}))
            for f in ("uid", "creationTimestamp"):
                new.setdefault("metadata", {})[f] = cur["metadata"][f]
        else:
            new = self._patched(cur, obj, ctype.split(";")[0].strip(), r[2], group)
        validation.validate(r[2], group, new)
        stored = self.store.put(key, new)
        self._reconcile_if(plural, cur, stored)
        return 200, stored, warn

    @staticmethod
    def _patched(cur: dict, patch: Any, ctype: str, kind: str, group: str) -> Any:
        """PATCH by its content type, as the real server: strategic merge for built-in kinds only."""
        if ctype == serverside.JSON_PATCH:
            return serverside.json_patch(cur, patch)
        if ctype == serverside.STRATEGIC:
            if any(r[0] == group and r[2] == kind for r in BUILTIN_RESOURCES):
                return serverside.strategic_merge(cur, patch, kind)
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                           f"accepted media types include: {serverside.JSON_PATCH}, {serverside.MERGE_PATCH}, "
                           f"{serverside.APPLY_PATCH}")  # fmt: skip
        if ctype == serverside.MERGE_PATCH:
            return merge_patch(cur, patch)
        raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted "
                       f"media types include: {serverside.JSON_PATCH}, {serverside.MERGE_PATCH}, {serverside.STRATEGIC}")  # fmt: skip


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def node_restriction(pod: dict, node: str, name: str) -> None:
    """NodeRestriction admission (1.23 wording): a kubelet creates only mirror pods bound to itself."""
    if MIRROR_ANNOTATION not in ((pod.get("metadata") or {}).get("annotations") or {}):
        raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: pod does not have "{MIRROR_ANNOTATION}" '
                       f'annotation, node "{node}" can only create mirror pods')  # fmt: skip
    if (pod.get("spec") or {}).get("nodeName") != node:
        raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: node "{node}" can only create pods with '
                       "spec.nodeName set to itself")  # fmt: skip


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def match_selector(selector: str, labels: dict[str, str]) -> bool:
    """Equality/existence label selectors: k=v, k==v, k!=v, k, !k (comma = AND)."""
    for term in [t.strip() for t in selector.split(",") if t.strip()]:
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = re.split(r"==?", term, maxsplit=1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


# The kubelet ConfigMaps kubeadm's RBAC lets joining nodes read: the legacy kubelet-config-1.23
# (1.24's upgrade leaves it and its Role in place) and, from 1.24, kubelet-config.
KUBELET_CONFIG_NAMES = (
    ("kubelet-config", f"kubelet-config-{MINOR[0]}.{MINOR[1] - 1}")
    if DOCKERSHIM_REMOVED
    else (f"kubelet-config-{MINOR[0]}.{MINOR[1]}",)
)


def version_info(version: str = VERSION) -> dict:
    return {
        "major": "1",
        "minor": version.split(".")[1],
        "gitVersion": version,
        "gitCommit": GIT_COMMIT,
        "gitTreeState": "clean",
        "buildDate": BUILD_DATE,
        "goVersion": GO_VERSION,
        "compiler": "gc",
        "platform": "linux/amd64",
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "standin-apiserver"
    api: ApiServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        peer = None
        with contextlib.suppress(AttributeError, ValueError):
            peer = self.connection.getpeercert() or None  # type: ignore[attr-defined]
        warn: list[str] = []
        if self.command == "GET" and q.get("watch") in ("true", "1"):
            self._watch(u.path, q, peer)
            return
        try:
            code, doc, warn = self.api.handle(self.command, u.path, q, body, peer, self.headers.get("Authorization"),
                                              self.headers.get("Content-Type") or "")  # fmt: skip
            if code == 200 and serverside.wants_table(self.headers.get("Accept") or "", doc):
                doc = serverside.table(doc, q.get("includeObject", "Metadata"))
        except ApiError as e:
            code, doc = e.code, e.status()
        except Fail as e:
            code, doc = 500, ApiError(500, "InternalError", e.message).status()
        ctype = "text/plain" if isinstance(doc, str) else "application/json"
        if isinstance(doc, bytes):
            payload, ctype = doc, "application/octet-stream"  # what kube-openapi serves the protobuf as
        else:
            payload = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        for w in warn:
            self.send_header("Warning", f'299 - "{w}"')
        self.end_headers()
        self.wfile.write(payload)

    def _watch(self, path: str, q: dict[str, str], peer: dict | None) -> None:
        serverside.watch(self, self.api.handle, path, q, peer)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class _TLSServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    ssl_ctx: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(60)
        if self.ssl_ctx is not None:  # handshake in the worker thread, not in accept()
            try:
                request = self.ssl_ctx.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return
        super().finish_request(request, client_address)


def serve_api(etcd: EtcdClient, cert: str, key: str, client_ca: str, ca_key: str, bind: str, port: int,
              cluster_cidr: str = "", git_version: str = VERSION,
              kubelet_client: tuple[str, str] | None = None) -> tuple[_TLSServer, ApiServer]:  # fmt: skip
    """Start the API server in a background thread (used by the unit and by tests), its objects in `etcd`."""
    api = ApiServer(etcd, client_ca, ca_key)
    api.cluster_cidr = cluster_cidr
    api.git_version = git_version
    api.kubelet_client = kubelet_client
    handler = type("H", (_Handler,), {"api": api})
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    srv_cls = type("S", (_TLSServer,), {"address_family": family})
    srv = srv_cls((bind, port), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(client_ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL  # like --client-ca-file: certificates are verified when presented
    srv.ssl_ctx = ctx
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, api
