"""What the API server refuses (apimachinery/apps validation, 1.23 wording): label keys and
values, node taints, and workloads whose selector does not match their pod template.

Limit: fields are not checked against the OpenAPI schemas here (the stand-in runs on lab nodes
without them); the manifests the roles render are validated against the 1.23 schemas by
tests/integration/test_k8s_templates.py instead."""

from __future__ import annotations

import json
import re
from typing import Any

from .client import ApiError

# From kubernetes/kubernetes staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go
# (v1.23: qualifiedNameFmt, labelValueFmt, dns1123SubdomainFmt and their messages, RegexError's
# "(e.g. ..., regex used for validation is '...')"). v1.23.17 is not stored here: the patterns and
# messages were checked at 008b3652 and 26c03096, where they moved to pkg/api/validate/content
# (kube.go: labelKeyFmt, labelValueErrMsg) with the same text.
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
PREFIX_MSG = (
    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
WORKLOADS = ("DaemonSet", "Deployment", "StatefulSet", "ReplicaSet")


def invalid(path: str, value: Any, msg: str) -> str:
    return f"{path}: Invalid value: {json.dumps(value)}: {msg}"


def label_value_errors(path: str, value: Any) -> list[str]:
    v = str(value)
    errs = [invalid(path, v, "must be no more than 63 characters")] if len(v) > 63 else []
    return errs + ([] if _VALUE.match(v) else [invalid(path, v, VALUE_MSG)])


def qualified_name_errors(path: str, key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return [invalid(path, key, "a qualified name must consist of alphanumeric characters, '-', '_' or '.', "
                        "and must start and end with an alphanumeric character with an optional DNS subdomain "
                        "prefix and '/' (e.g. 'example.com/MyName')")]  # fmt: skip
    errs = []
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        errs.append(invalid(path, key, PREFIX_MSG))
    if not name:
        errs.append(invalid(path, key, "name part must be non-empty"))
    elif len(name) > 63:
        errs.append(invalid(path, key, "name part must be no more than 63 characters"))
    elif not _NAME.match(name):
        errs.append(invalid(path, key, NAME_MSG))
    return errs


def _label_errors(labels: Any, path: str) -> list[str]:
    errs: list[str] = []
    for k, v in (labels or {}).items():
        errs += qualified_name_errors(path, str(k)) + label_value_errors(path, v)
    return errs


def _taint_errors(taints: Any) -> list[str]:
    errs: list[str] = []
    for i, t in enumerate(taints or []):
        errs += qualified_name_errors(f"spec.taints[{i}].key", str(t.get("key", "")))
        if t.get("value"):
            errs += label_value_errors(f"spec.taints[{i}].value", t["value"])
        if t.get("effect") not in EFFECTS:
            errs.append(f'spec.taints[{i}].effect: Unsupported value: {json.dumps(t.get("effect", ""))}: supported '
                        'values: "NoSchedule", "PreferNoSchedule", "NoExecute"')  # fmt: skip
    return errs


def _selector_matches(selector: dict, labels: dict) -> bool:
    ml = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in ml.items()):
        return False
    for e in selector.get("matchExpressions") or []:
        have, op, vals = e.get("key") in labels, e.get("operator"), e.get("values") or []
        if (op == "In" and labels.get(e.get("key")) not in vals) or (op == "NotIn" and labels.get(e.get("key")) in vals) \
                or (op == "Exists" and not have) or (op == "DoesNotExist" and have):  # fmt: skip
            return False
    return True


def _workload_errors(obj: dict) -> list[str]:
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    tlabels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return ["spec.selector: Required value"]
    errs = _label_errors(tlabels, "spec.template.metadata.labels")
    if not _selector_matches(selector, tlabels):
        pairs = ", ".join(f'"{k}":"{v}"' for k, v in sorted(tlabels.items()))
        errs.append(f"spec.template.metadata.labels: Invalid value: map[string]string{{{pairs}}}: `selector` does "
                    "not match template `labels`")  # fmt: skip
    return errs


def validate(kind: str, group: str, obj: dict) -> None:
    """Raise the API server's 422 Invalid for what it refuses, all problems in one message."""
    meta = obj.get("metadata") or {}
    errs = _label_errors(meta.get("labels"), "metadata.labels")
    if kind == "Node":
        errs += _taint_errors((obj.get("spec") or {}).get("taints"))
    if kind in WORKLOADS:
        errs += _workload_errors(obj)
    if errs:
        detail = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
        qualified = f"{kind}.{group}" if group else kind
        raise ApiError(422, "Invalid", f'{qualified} "{meta.get("name", "")}" is invalid: {detail}',
                       {"name": meta.get("name", ""), "kind": kind.lower()})  # fmt: skip
