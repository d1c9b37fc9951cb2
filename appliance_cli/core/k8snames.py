"""Kubernetes' naming rules (apimachinery's validation), for values the site config turns into
Kubernetes objects: a hardware class becomes a node label value, a domain a certificate SAN.
Checked at `config validate` so a site learns of them before anything is installed."""

from __future__ import annotations

import ipaddress
import re

# with fullmatch: `$` would accept a trailing newline
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

LABEL_VALUE_RULE = (
    "a label value is at most 63 characters of letters, digits, '-', '_' and '.', "
    "starting and ending with a letter or digit"
)
SUBDOMAIN_RULE = "a lower-case RFC 1123 subdomain: letters, digits, '-' and '.', at most 253 characters"


def label_value_problem(value: str) -> str | None:
    """None when `value` is a valid label value, else why not (k8s IsValidLabelValue)."""
    if len(value) > 63:
        return f"it has {len(value)} characters; {LABEL_VALUE_RULE}"
    if not _LABEL_VALUE.fullmatch(value):
        return LABEL_VALUE_RULE
    return None


def label_key_problem(key: str) -> str | None:
    """k8s IsQualifiedName: [prefix/]name, prefix a DNS subdomain, name like a label value."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return "a label key has at most one '/' (prefix/name)"
    if prefix and subdomain_problem(prefix):
        return f"its prefix '{prefix}' is not {SUBDOMAIN_RULE}"
    if not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        return "its name part must be 1-63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
    return None


def subdomain_problem(value: str) -> str | None:
    if len(value) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(value):
        return f"not {SUBDOMAIN_RULE}"
    return None


def cert_san_problem(value: str) -> str | None:
    """kubeadm ValidateCertSANs: an IP address, a DNS subdomain, or '*.' and a subdomain."""
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    name = value[2:] if value.startswith("*.") else value
    if subdomain_problem(name):
        return f"not an IP address, a DNS name or '*.' and a DNS name ({SUBDOMAIN_RULE})"
    return None
