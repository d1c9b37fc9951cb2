"""Researcher access: the kubeconfig a researcher gets for one project (Run:ai seed section 3,
"Command-line Interface Access"). Pure functions over the site config and the master's admin
kubeconfig: the cluster's CA and server are taken from it, never its admin credentials; the user
is the OIDC auth-provider the identity provider logs researchers in with."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import yaml

from appliance_cli.core import siteconfig
from appliance_cli.core.siteconfig import SiteConfig, oidc_settings
from appliance_cli.errors import ApplianceError, ConfigError, UsageError
from appliance_cli.fsutil import read_regular

# What Run:ai's General | Settings | Researcher Authentication shows as the client configuration
# on a self-hosted (air-gapped) backend, and the user name its guide puts in every context.
RUNAI_USER = "runai-authenticated-user"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,62}")


def project_namespace(cfg: SiteConfig, project: str) -> str:
    """The project's namespace: siteconfig's one rule (runai-<project>, project-<project>)."""
    return siteconfig.project_namespace(cfg.scheduler.stack, project)


def check_request(cfg: SiteConfig, name: str, project: str) -> dict[str, str]:
    """The site's OIDC settings, or a UsageError naming what is wrong (one line)."""
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"researcher name {name!r} is not usable in a kubeconfig (letters, digits, '.', '_', '@', '-')"
        )
    oidc = oidc_settings(cfg)
    if not oidc or not oidc.get("issuer_url") or not oidc.get("client_id"):
        raise UsageError(
            f"{cfg.source}: the site has no researcher authentication (scheduler.oidc): "
            "a researcher kubeconfig would have no way to log in",
            hint="set scheduler.oidc (Run:ai sites have it by default), run `appliance install`, then ask again",
        )
    known = [p.name for p in cfg.scheduler.projects]
    if project not in known:
        raise UsageError(
            f"unknown project '{project}' (known: {', '.join(known) or 'none'})",
            hint="projects are scheduler.projects in appliance.yml",
        )
    return oidc


def cluster_of(admin_conf: str) -> tuple[str, str, str]:
    """(cluster name, server, certificate-authority-data) of the admin kubeconfig's current context."""
    try:
        doc = yaml.safe_load(admin_conf) or {}
        ctx_name = doc.get("current-context") or ""
        ctx = next((c["context"] for c in doc.get("contexts") or [] if c.get("name") == ctx_name), None)
        ctx = ctx or (doc.get("contexts") or [{}])[0].get("context") or {}
        clusters = doc.get("clusters") or []
        entry = next(
            (c for c in clusters if c.get("name") == ctx.get("cluster")), clusters[0] if clusters else {}
        )
        cluster = entry.get("cluster") or {}
        server, ca = str(cluster.get("server") or ""), str(cluster.get("certificate-authority-data") or "")
    except (yaml.YAMLError, AttributeError, KeyError, TypeError, IndexError):
        server, ca, entry = "", "", {}
    if not server or not ca:
        raise ApplianceError(
            "the master's admin kubeconfig has no cluster server and embedded CA to hand on",
            hint="has `appliance install` completed the control plane?",
        )
    return str(entry.get("name") or "kubernetes"), server, ca


def _ca_pem(cfg: SiteConfig, path: Path) -> bytes:
    """The OIDC issuer's CA file; ConfigError naming its field unless it is a readable regular file."""
    given = cfg.scheduler.oidc is not None and cfg.scheduler.oidc.ca_file
    field = "scheduler.oidc.ca_file" if given else "site.tls.ca"
    try:
        return read_regular(path, 16 * 1024**2)
    except OSError as exc:
        raise ConfigError([f"{field}: {path}: cannot read it ({exc.strerror or exc})"]) from None


def _user(cfg: SiteConfig, name: str, oidc: dict[str, str]) -> dict[str, Any]:
    issuer = oidc["issuer_url"]
    if cfg.scheduler.stack == "runai":  # Run:ai's client configuration: `runai login` fills in the tokens
        realm = issuer.rstrip("/").rpartition("/realms/")[2] or "runai"
        config = {"airgapped": "true", "auth-flow": "cli", "realm": realm,
                  "client-id": oidc["client_id"], "idp-issuer-url": issuer}  # fmt: skip
        return {"name": RUNAI_USER, "user": {"auth-provider": {"name": "oidc", "config": config}}}
    # kubectl 1.23's own oidc auth-provider; the researcher adds id-token/refresh-token from the IdP
    config = {"client-id": oidc["client_id"], "idp-issuer-url": issuer}
    if oidc.get("ca_file"):
        pem = _ca_pem(cfg, Path(oidc["ca_file"]))
        config["idp-certificate-authority-data"] = base64.b64encode(pem).decode()
    return {"name": name, "user": {"auth-provider": {"name": "oidc", "config": config}}}


def researcher_kubeconfig(cfg: SiteConfig, name: str, project: str, admin_conf: str) -> str:
    """A kubeconfig for researcher `name` in `project`: the cluster (CA, server) from admin.conf,
    the OIDC user, the project's namespace; no client certificate, key or token."""
    oidc = check_request(cfg, name, project)
    cluster, server, ca = cluster_of(admin_conf)
    user = _user(cfg, name, oidc)
    context = f"{name}@{cfg.site.name}-{project}"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": cluster, "cluster": {"certificate-authority-data": ca, "server": server}}],
        "users": [user],
        "contexts": [
            {
                "name": context,
                "context": {
                    "cluster": cluster,
                    "user": user["name"],
                    "namespace": project_namespace(cfg, project),
                },
            }
        ],
        "current-context": context,
    }
    return yaml.safe_dump(doc, default_flow_style=False, sort_keys=False)
