"""The API server's --oidc-* flags as pure functions, run on the controller (tested in plain
pytest: tests/unit/test_control_plane_oidc.py).

* `control_plane_oidc_flags`: the site's OIDC settings (group_vars' appliance_scheduler_oidc) ->
  {flag: value}, the one source of the flags for `kubeadm init` (kubeadm-config.yaml.j2) and for
  the running API server (tasks/oidc.yml).
* `control_plane_oidc_manifest`: kube-apiserver.yaml with only its --oidc-* command items added,
  replaced or removed. The edit is made on the text at the positions the YAML parser reports,
  so every other byte stays as kubeadm (or an admin) wrote it; the result is parsed again and
  must equal the original document with only those items changed, else nothing is returned.
* `control_plane_oidc_cluster_config`: kubeadm's ClusterConfiguration (the kube-system/
  kubeadm-config ConfigMap) with apiServer.extraArgs' oidc-* keys set the same way: what
  `kubeadm upgrade` renders the manifest from. Unchanged text when nothing differs; otherwise
  dumped with sorted keys, as kubeadm and its marshaller write it.
* `control_plane_oidc_pod_state`: whether the running API server (its mirror pod, what the
  kubelet reports of the static pod it runs) has exactly these flags and is Ready.
* `control_plane_oidc_manifest_flags`: the --oidc-* flags a manifest gives the API server (what
  a restored manifest must be seen running with).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

PREFIX = "oidc-"
# appliance_scheduler_oidc key -> kube-apiserver flag, in kubeadm's (sorted) order of the flags
SETTINGS = {
    "ca_file": "oidc-ca-file",
    "client_id": "oidc-client-id",
    "groups_claim": "oidc-groups-claim",
    "groups_prefix": "oidc-groups-prefix",
    "issuer_url": "oidc-issuer-url",
    "username_claim": "oidc-username-claim",
    "username_prefix": "oidc-username-prefix",
}


class OidcEditError(ValueError):
    """A manifest or configuration the filters cannot edit safely; the message says why."""


def _plain(data: Any) -> Any:
    """ansible-core hands filters tagged objects; a JSON round trip gives plain ones."""
    return json.loads(json.dumps(data))


def oidc_flags(settings: Mapping[str, Any] | None, ca_dest: str) -> dict[str, str]:
    """{} for no OIDC; empty settings are left out; the CA is the copy on the master (ca_dest)."""
    settings = _plain(settings or {})
    if not settings:
        return {}
    out = {}
    for key, flag in SETTINGS.items():
        value = settings.get(key)
        if value is None or str(value) == "":
            continue
        out[flag] = ca_dest if key == "ca_file" else str(value)
    return out


def _check_flags(flags: Mapping[str, Any]) -> dict[str, str]:
    flags = {str(k): str(v) for k, v in _plain(dict(flags or {})).items()}
    bad = [k for k in flags if not k.startswith(PREFIX)]
    if bad:
        raise OidcEditError(f"not OIDC flags: {', '.join(sorted(bad))}")
    return flags


def _get(node: yaml.Node, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return v
    return None


def _command_node(root: yaml.Node) -> yaml.SequenceNode:
    containers = _get(_get(root, "spec") or yaml.MappingNode("", []), "containers")
    if not isinstance(containers, yaml.SequenceNode) or not containers.value:
        raise OidcEditError("no spec.containers in the manifest")
    container = next(
        (c for c in containers.value if getattr(_get(c, "name"), "value", None) == "kube-apiserver"),
        containers.value[0],
    )
    command = _get(container, "command")
    if not isinstance(command, yaml.SequenceNode) or not command.value:
        raise OidcEditError("the kube-apiserver container has no command list")
    if command.flow_style:
        raise OidcEditError("the command list is a flow sequence ([...]); kubeadm writes one item a line")
    if not all(isinstance(i, yaml.ScalarNode) for i in command.value):
        raise OidcEditError("the command list holds something other than strings")
    return command


def _scalar(value: str) -> str:
    """value as one YAML scalar on one line (plain when it can be, quoted otherwise)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=True)
    text = text.removesuffix("\n").removesuffix("\n...").removesuffix("...").rstrip("\n")
    if "\n" in text:
        raise OidcEditError(f"{value!r} does not fit on one line")
    return text


def _line_bounds(text: str, start: int, end: int) -> tuple[int, int, str]:
    """(line start, index after the line's newline, the prefix before the scalar) of one item."""
    ls = text.rfind("\n", 0, start) + 1
    le = text.find("\n", end)
    le = len(text) if le < 0 else le + 1
    prefix, rest = text[ls:start], text[end:le].strip()
    if not prefix.strip() == "-" or (rest and not rest.startswith("#")):
        raise OidcEditError(
            f"command item at line {text.count(chr(10), 0, start) + 1} is not alone on its line"
        )
    return ls, le, prefix


def _flag_name(arg: str) -> str | None:
    return arg[2:].partition("=")[0] if arg.startswith("--") else None


def _edits(text: str, items: list[yaml.ScalarNode], wanted: dict[str, str]) -> list[tuple[int, int, str]]:
    """(start, end, replacement) spans over the original text."""
    edits, seen = [], set()
    for item in items[1:]:
        name = _flag_name(item.value)
        if name is None or not name.startswith(PREFIX):
            continue
        ls, le, _ = _line_bounds(text, item.start_mark.index, item.end_mark.index)
        new = f"--{name}={wanted[name]}" if name in wanted else None
        if name in seen or new is None:  # not wanted (or a duplicate): the whole line goes
            edits.append((ls, le, ""))
        elif new != item.value:
            edits.append((item.start_mark.index, item.end_mark.index, _scalar(new)))
        seen.add(name)
    for name in sorted(set(wanted) - seen):  # new ones where kubeadm would put them (sorted)
        after = [i for i in items[1:] if (_flag_name(i.value) or "") > name]
        anchor = after[0] if after else items[-1]
        ls, le, prefix = _line_bounds(text, anchor.start_mark.index, anchor.end_mark.index)
        line = f"{prefix}{_scalar(f'--{name}={wanted[name]}')}\n"
        if after:
            edits.append((ls, ls, line))
        else:
            edits.append((le, le, line if text[le - 1 : le] == "\n" else "\n" + line.rstrip("\n")))
    return edits


def _expected(doc: Any, wanted: dict[str, str]) -> Any:
    """The document as the edit must leave it (to check the text edit against)."""
    containers = doc["spec"]["containers"]
    c = next((c for c in containers if c.get("name") == "kube-apiserver"), containers[0])
    cmd, seen, out = c["command"], set(), [c["command"][0]]
    for arg in cmd[1:]:
        name = _flag_name(arg) if isinstance(arg, str) else None
        if name and name.startswith(PREFIX):
            if name in wanted and name not in seen:
                out.append(f"--{name}={wanted[name]}")
            seen.add(name)
        else:
            out.append(arg)
    for name in sorted(set(wanted) - seen):
        later = [i for i, a in enumerate(out) if i > 0 and (_flag_name(a) or "") > name]
        out.insert(later[0] if later else len(out), f"--{name}={wanted[name]}")
    c["command"] = out
    return doc


def manifest_oidc(text: str, flags: Mapping[str, Any]) -> str:
    """kube-apiserver.yaml with exactly `flags` as its --oidc-* items; the same text when it has them."""
    wanted = _check_flags(flags)
    text = str(text)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise OidcEditError(f"the manifest is not YAML: {exc}") from None
    if root is None:
        raise OidcEditError("the manifest is empty")
    items = _command_node(root).value
    new = text
    edits = sorted((start, end, i, repl) for i, (start, end, repl) in enumerate(_edits(text, items, wanted)))
    for start, end, _, repl in reversed(edits):  # from the end: earlier spans keep their offsets
        new = new[:start] + repl + new[end:]
    if new != text and yaml.safe_load(new) != _expected(doc, wanted):
        raise OidcEditError("editing the command list would change more than its --oidc-* items")
    return new


def manifest_flags(text: str) -> dict[str, str]:
    """{flag: value} of the --oidc-* items in kube-apiserver.yaml's command list."""
    try:
        root = yaml.compose(str(text), Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise OidcEditError(f"the manifest is not YAML: {exc}") from None
    if root is None:
        raise OidcEditError("the manifest is empty")
    out = {}
    for item in _command_node(root).value[1:]:
        name = _flag_name(str(item.value)) if isinstance(item, yaml.ScalarNode) else None
        if name and name.startswith(PREFIX):
            out[name] = str(item.value).partition("=")[2]
    return out


def cluster_config_oidc(text: str, flags: Mapping[str, Any]) -> str:
    """kubeadm's ClusterConfiguration with exactly `flags` as apiServer.extraArgs' oidc-* keys."""
    wanted = _check_flags(flags)
    text = str(text)
    try:
        cfg = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise OidcEditError(f"ClusterConfiguration is not YAML: {exc}") from None
    if not isinstance(cfg, dict) or cfg.get("kind") != "ClusterConfiguration":
        raise OidcEditError("not a kubeadm ClusterConfiguration")
    api = cfg.get("apiServer") or {}
    extra = {str(k): str(v) for k, v in (api.get("extraArgs") or {}).items()}
    new_extra = {k: v for k, v in extra.items() if not k.startswith(PREFIX)} | wanted
    if new_extra == extra:
        return text
    api = dict(api)
    if new_extra:
        api["extraArgs"] = dict(sorted(new_extra.items()))
    else:
        api.pop("extraArgs", None)
    cfg["apiServer"] = api
    return yaml.safe_dump(cfg, default_flow_style=False, sort_keys=True)


def pod_state(pod_json: str, flags: Mapping[str, Any]) -> str:
    """'ok' when the mirror pod's command has exactly `flags` as its --oidc-* flags and it is
    Ready; otherwise what is not so (one short phrase, for the failure line)."""
    wanted = _check_flags(flags)
    try:
        pod = json.loads(str(pod_json) or "null")
    except ValueError:
        pod = None
    if not isinstance(pod, dict):
        return "the API server does not answer"
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    cmd = containers[0].get("command") or []
    have = {}
    for arg in cmd[1:]:
        name = _flag_name(str(arg))
        if name and name.startswith(PREFIX):
            have[name] = str(arg).partition("=")[2]
    if have != wanted:
        return "the running API server has other --oidc-* flags"
    ready = next(
        (
            c.get("status")
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") == "Ready"
        ),
        None,
    )
    return "ok" if ready == "True" else "the API server is not Ready"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "control_plane_oidc_flags": oidc_flags,
            "control_plane_oidc_manifest": manifest_oidc,
            "control_plane_oidc_cluster_config": cluster_config_oidc,
            "control_plane_oidc_pod_state": pod_state,
            "control_plane_oidc_manifest_flags": manifest_flags,
        }
