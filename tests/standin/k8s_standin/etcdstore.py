"""The API server's store (`Store`): its objects in a real etcd 3.5, through etcd's v3 JSON gateway over mutual TLS.

Keys are kube-apiserver's: `/registry/<prefix>[/<namespace>]/<name>`, where the prefix is

* the resource's plural for a built-in resource, except the few kube-apiserver renames
  (`SpecialDefaultResourcePrefixes`, kubernetes/kubernetes pkg/kubeapiserver/
  default_storage_factory_builder.go, read in copies that cite it; `nodes` → `minions`,
  `services` → `services/specs`, `endpoints` → `services/endpoints`, `ingresses` → `ingress`,
  `podsecuritypolicies` → `podsecuritypolicy`, `replicationcontrollers` → `controllers`);
* `<group>/<plural>` for what the apiextensions and aggregator servers keep (CRDs, APIServices)
  and for every custom resource (apiextensions-apiserver's customresource_handler.go: the
  resource prefix is path.Join(group, plural)).

Values are the object as JSON without `metadata.resourceVersion` (kube-apiserver clears it before
it writes, storage/etcd3's versioner), and an object's resourceVersion is its key's mod_revision;
a list's is the store's revision. Not as real: built-in objects are JSON where kube-apiserver
writes protobuf (`k8s\\x00...`); no leases, no watch cache, no compaction.

The gateway (etcd 3.5's grpc-gateway, `/v3/kv/range|put|deleterange`) takes and gives key and value
base64-encoded in JSON, int64s as strings (etcd's api/etcdserverpb/rpc.proto, v3.5).
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import secrets
import ssl
import threading
import time
import urllib.parse
from typing import Any

from .util import Fail, rfc3339

REGISTRY = "/registry/"
# kube-apiserver's renames of a built-in resource's etcd prefix (module docstring)
SPECIAL_PREFIXES = {("", "replicationcontrollers"): "controllers", ("", "endpoints"): "services/endpoints",
                    ("", "nodes"): "minions", ("", "services"): "services/specs", ("extensions", "ingresses"): "ingress",
                    ("networking.k8s.io", "ingresses"): "ingress", ("extensions", "podsecuritypolicies"): "podsecuritypolicy",
                    ("policy", "podsecuritypolicies"): "podsecuritypolicy"}  # fmt: skip
# groups served by the apiextensions and aggregator servers: their prefixes carry the group
GROUPED = {"apiextensions.k8s.io", "apiregistration.k8s.io"}


def etcd_key(builtin: set[tuple[str, str]], group: str, plural: str, ns: str, name: str) -> str:
    """kube-apiserver's etcd key of an object (`builtin`: the (group, plural) pairs it serves itself)."""
    if (group, plural) in builtin and group not in GROUPED:
        prefix = SPECIAL_PREFIXES.get((group, plural), plural)
    else:
        prefix = f"{group}/{plural}"
    return REGISTRY + prefix + (f"/{ns}" if ns else "") + f"/{name}"


def resource_of(builtin: set[tuple[str, str]], key: str) -> tuple[str, str, str, str]:
    """(group, plural, namespace, name) of an etcd key etcd_key made (ValueError: not one)."""
    if not key.startswith(REGISTRY):
        raise ValueError(key)
    parts = key[len(REGISTRY) :].split("/")
    renamed = {v: k for k, v in SPECIAL_PREFIXES.items() if k in builtin}
    plain = {p: (g, p) for g, p in sorted(builtin, reverse=True) if (g, p) not in SPECIAL_PREFIXES}
    if len(parts) >= 3 and "/".join(parts[:2]) in renamed:
        (group, plural), rest = renamed["/".join(parts[:2])], parts[2:]
    elif parts[0] in renamed:
        (group, plural), rest = renamed[parts[0]], parts[1:]
    elif "." in parts[0] and len(parts) >= 3:
        group, plural, rest = parts[0], parts[1], parts[2:]
    elif parts[0] in plain:
        (group, plural), rest = plain[parts[0]], parts[1:]
    else:
        raise ValueError(key)
    if len(rest) == 1 and rest[0]:
        return group, plural, "", rest[0]
    if len(rest) == 2 and all(rest):
        return group, plural, rest[0], rest[1]
    raise ValueError(key)


class EtcdClient:
    """One kept-alive HTTPS connection to the first of --etcd-servers, with the client certificate
    kubeadm made for the API server (apiserver-etcd-client), trusting etcd's CA only."""

    def __init__(self, servers: str, cafile: str, certfile: str, keyfile: str, timeout: float = 10.0) -> None:
        u = urllib.parse.urlsplit(servers.split(",")[0].strip())
        if u.scheme != "https" or not u.hostname:
            raise Fail(f'Error: --etcd-servers "{servers}": standin: only https://HOST:PORT is supported')
        self.host, self.port, self.timeout = u.hostname, u.port or 2379, timeout
        self.ctx = ssl.create_default_context(cafile=cafile)
        self.ctx.load_cert_chain(certfile, keyfile)
        self.lock = threading.Lock()
        self.conn: http.client.HTTPSConnection | None = None

    def call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST /v3/kv/METHOD; the reply (Fail: etcd unreachable or refusing, in its words)."""
        data = json.dumps(body).encode()
        with self.lock:
            for attempt in (1, 2):  # a kept-alive connection etcd closed: one new one
                if self.conn is None:
                    self.conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                                            context=self.ctx)  # fmt: skip
                try:
                    self.conn.request("POST", f"/v3/kv/{method}", data, {"Content-Type": "application/json"})
                    resp = self.conn.getresponse()
                    raw = resp.read()
                    break
                except (OSError, http.client.HTTPException) as e:
                    self.conn.close()
                    self.conn = None
                    if attempt == 2:
                        raise Fail(f"etcdserver: {self._dial_error(e)}") from e
        try:
            doc = json.loads(raw or b"{}")
        except ValueError as e:
            raise Fail(f"etcdserver: {self.host}:{self.port}: not a gateway reply: {raw[:200]!r}") from e
        if resp.status != 200:
            raise Fail(f"etcdserver: {doc.get('message') or doc.get('error') or raw[:200]!r}")
        return doc

    def _dial_error(self, e: BaseException) -> str:
        """What went wrong, in Go's net/tls words where there are some (grpc quotes them)."""
        where = f"dial tcp {self.host}:{self.port}"
        if isinstance(e, ConnectionRefusedError):
            return f"{where}: connect: connection refused"
        if isinstance(e, TimeoutError):
            return f"{where}: i/o timeout"
        if isinstance(e, ssl.SSLError):
            return f"authentication handshake failed: {e.reason or e}"
        return f"{where}: {e}"

    def ping(self) -> None:
        """One read: etcd answers (Fail: what went wrong)."""
        self.call("range", {"key": _b64(REGISTRY), "limit": "1", "keys_only": True})

    def wait(self, deadline_s: float) -> None:
        """Until etcd answers (Fail: it did not within deadline_s)."""
        end = time.monotonic() + deadline_s
        while True:
            try:
                self.ping()
                return
            except Fail as e:
                if time.monotonic() >= end:
                    raise Fail(
                        f"Error: context deadline exceeded (etcd at {self.host}:{self.port}: {e.message})"
                    ) from e
                time.sleep(0.2)

    def load(self) -> tuple[int, list[tuple[str, bytes, int]]]:
        """The store's revision and every (key, value, mod_revision) under /registry/."""
        doc = self.call("range", {"key": _b64(REGISTRY), "range_end": _b64(REGISTRY[:-1] + "0")})
        kvs = [(_unb64(kv["key"]).decode(), _unb64(kv.get("value", "")), int(kv["mod_revision"]))
               for kv in doc.get("kvs") or []]  # fmt: skip
        return int(doc["header"]["revision"]), kvs

    def put(self, key: str, value: bytes) -> int:
        return int(self.call("put", {"key": _b64(key), "value": _b64(value)})["header"]["revision"])

    def delete(self, key: str) -> int:
        return int(self.call("deleterange", {"key": _b64(key)})["header"]["revision"])


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _unb64(s: str) -> bytes:
    return base64.b64decode(s)


class Store:
    """Cluster state: every object in etcd (above), and a copy in memory that the reads are served
    from (what kube-apiserver's watch cache does; not a quorum read per GET)."""

    def __init__(self, etcd: EtcdClient, builtin: frozenset[tuple[str, str]]) -> None:
        self.etcd = etcd
        self.builtin = builtin  # what this API server serves itself: their keys carry no group
        self.lock = threading.RLock()
        self.objects: dict[str, dict] = {}
        self.rv, kvs = etcd.load()
        for ekey, value, mod in kvs:
            try:
                group, plural, ns, name = resource_of(builtin, ekey)
                obj = json.loads(value)
            except ValueError:
                continue  # not an object this server wrote (kube-apiserver would fail to decode it)
            obj.setdefault("metadata", {})["resourceVersion"] = str(mod)
            self.objects[self.key(group, plural, ns, name)] = obj
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            key = self.key("", "namespaces", "", ns)
            if key not in self.objects:
                self.put(key, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    @staticmethod
    def key(group: str, plural: str, ns: str, name: str) -> str:
        return f"{group}|{plural}|{ns}|{name}"

    def put(self, key: str, obj: dict) -> dict:
        with self.lock:
            md = obj.setdefault("metadata", {})
            md.setdefault("uid", str(_uuid4()))
            md.setdefault("creationTimestamp", rfc3339())
            if obj.get("kind") == "Namespace":
                obj.setdefault("spec", {"finalizers": ["kubernetes"]})
                obj["status"] = {"phase": "Active"}
                md.setdefault("labels", {})["kubernetes.io/metadata.name"] = md["name"]
            md.pop("resourceVersion", None)  # kube-apiserver stores none: it is the key's revision
            self.rv = self.etcd.put(
                etcd_key(self.builtin, *key.split("|")), json.dumps(obj, separators=(",", ":")).encode()
            )
            md["resourceVersion"] = str(self.rv)
            self.objects[key] = obj
            return obj

    def delete(self, key: str) -> dict | None:
        with self.lock:
            if key not in self.objects:
                return None
            self.rv = self.etcd.delete(etcd_key(self.builtin, *key.split("|")))
            return self.objects.pop(key)

    def items(self, group: str, plural: str, ns: str | None = None) -> list[dict]:
        with self.lock:
            return [copy.deepcopy(o) for o in self.view(group, plural, ns)]

    def view(self, group: str, plural: str, ns: str | None = None) -> list[dict]:
        """The objects themselves, not copies, for a caller that only reads them: discovery reads
        every CRD on each request, and copying their schemas (Volcano's and the GPU operator's run
        to megabytes) was three quarters of an idle API server's CPU."""
        pre = f"{group}|{plural}|"
        with self.lock:
            return [
                o
                for k, o in sorted(self.objects.items())
                if k.startswith(pre) and (ns is None or k.split("|")[2] == ns)
            ]


def _uuid4() -> str:
    b = bytearray(secrets.token_bytes(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
