"""Typed site fields (issue 28): every site value that reaches a node or a command has a type.

Hosts are an IP address or an RFC 1123 host name, HOST:PORT has a port 1-65535, versions and the
join token's TTL are strict, paths are absolute (where a node reads them) with no control
character. Values reach commands as argv, so a path holding a space or a `;` is data and is
taken; a control character or a relative path is refused. Each refusal is one line naming the
field, exit 2 from `appliance config validate`, no traceback."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance_cli.bundle.profile import carried_kubernetes_releases, load_profile
from appliance_cli.cli.main import main
from appliance_cli.core.siteconfig import SiteConfig, oidc_settings, parse_site
from appliance_cli.errors import ConfigError
from tests._support.paths import EXAMPLE

BASE = yaml.safe_load(EXAMPLE.read_text())
CARRIED = load_profile("appliance-k8s1.23").kubernetes_release()  # v1.23.17 today


def problems_of(data: dict[str, Any]) -> list[str]:
    try:
        parse_site(data)
    except ConfigError as exc:
        return exc.problems
    return []


def site_with(put: Callable[[dict[str, Any], Any], None], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    put(data, value)
    return data


def at(*path: str | int) -> Callable[[dict[str, Any], Any], None]:
    """A setter of the field at `path` (sections created as needed)."""

    def put(data: dict[str, Any], value: Any) -> None:
        node = data
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
        node[path[-1]] = value

    return put


def _researcher_registry(data: dict[str, Any], value: str) -> None:
    data["researcher_registry"] = {"address": value, "users": [{"name": "alice", "password_file": "a"}]}


def _jumpbox_user(data: dict[str, Any], value: str) -> None:
    data["scheduler"]["jumpbox"] = {"name": "jumpbox", "address": "192.168.10.40", "user": value}


def _jumpbox_address(data: dict[str, Any], value: str) -> None:
    data["scheduler"]["jumpbox"] = {"name": "jumpbox", "address": value}


def _tls_ca(data: dict[str, Any], value: str) -> None:
    data["site"]["tls"] = {"certificate": "tls/a.crt", "key": "tls/a.key", "ca": value}


def _one_of(*path: str) -> Callable[[dict[str, Any], Any], None]:
    """A setter of the list field at `path` to [value]."""
    put = at(*path)
    return lambda data, value: put(data, [value])


def _oidc(key: str) -> Callable[[dict[str, Any], Any], None]:
    def put(data: dict[str, Any], value: Any) -> None:
        data["scheduler"]["oidc"] = {key: value}

    return put


# (field as the problem names it, setter, hostile value, what the problem says after the value)
REFUSED: list[tuple[str, Callable[[dict[str, Any], Any], None], str, str]] = [
    # hosts
    (
        "nfs.server",
        at("nfs", "server"),
        "192.168.10.5;touch${IFS}/tmp/x",
        "is not an IP address or an RFC 1123",
    ),
    ("nfs.server", at("nfs", "server"), "-oProxyCommand=touch", "is not an IP address or an RFC 1123"),
    ("nfs.server", at("nfs", "server"), "filer_1", "is not an IP address or an RFC 1123"),
    ("nfs.server", at("nfs", "server"), "filer.", "is not an IP address or an RFC 1123"),
    ("nfs.server", at("nfs", "server"), "-filer", "is not an IP address or an RFC 1123"),
    ("nfs.server", at("nfs", "server"), "a" * 64, "is not an IP address or an RFC 1123"),
    ("nfs.server", at("nfs", "server"), ".".join(["a" * 63] * 4), "is not an IP address or an RFC 1123"),
    ("nfs.server", at("nfs", "server"), "192.168.10.256", "is not an IP address or an RFC 1123"),
    ("nfs.server", at("nfs", "server"), "fd00::5%eth0;touch x", "is not an IP address or an RFC 1123"),
    (
        "network.ntp_servers[0]",
        _one_of("network", "ntp_servers"),
        "10.0.0.1 iburst\nserver evil",
        "is not an IP",
    ),
    ("network.dns_servers[0]", _one_of("network", "dns_servers"), "dns.example", "is not an IP address"),
    ("kubernetes.dns_domain", at("kubernetes", "dns_domain"), "cluster.local;x", "is not an RFC 1123 host"),
    # an IPv6 scope takes any text after '%' (ipaddress): none in a site's addresses
    ("nodes[1].address", at("nodes", 1, "address"), "fe80::1%\ntouch x", "is not an IP address"),
    ("scheduler.external_ip", at("scheduler", "external_ip"), "fe80::1%eth0", "is not an IP address"),
    ("scheduler.jumpbox.address", _jumpbox_address, "fe80::1%;x", "is not an IP address"),
    # HOST:PORT
    ("registry.address", at("registry", "address"), "master1", "is not HOST:PORT"),
    ("registry.address", at("registry", "address"), "master1:5000;touch x", "is not HOST:PORT"),
    ("registry.address", at("registry", "address"), "master1:0", "is not HOST:PORT"),
    ("registry.address", at("registry", "address"), "master1:65536", "is not HOST:PORT"),
    ("registry.address", at("registry", "address"), "master1:05000", "is not HOST:PORT"),
    ("registry.address", at("registry", "address"), ":5000", "is not HOST:PORT"),
    ("registry.address", at("registry", "address"), "[master1]:5000", "is not HOST:PORT"),
    ("registry.address", at("registry", "address"), "fd00::1:5000", "is not HOST:PORT"),
    ("registry.address", at("registry", "address"), "[192.168.10.11]:5000", "has no IPv6 address in []"),
    ("registry.address", at("registry", "address"), "master 1:5000", "has a host that is not an IP"),
    ("researcher_registry.address", _researcher_registry, "master1:99999", "is not HOST:PORT"),
    # paths on the nodes: absolute, no control character, no '..'
    ("nfs.path", at("nfs", "path"), "export/runai", "is not an absolute path"),
    ("nfs.path", at("nfs", "path"), "/export/runai\n/etc *(rw)", "holds a control character"),
    ("nfs.path", at("nfs", "path"), "/export/../etc", "has a '..' component"),
    ("bundle.path", at("bundle", "path"), "/srv/appliance/bundle\x00x", "holds a control character"),
    ("bundle.path", at("bundle", "path"), "", "is empty"),
    ("bundle.source", at("bundle", "source"), "bundle", "is not an absolute path"),
    ("bundle.master_source", at("bundle", "master_source"), "/media/usb\x1b[2J", "holds a control character"),
    # paths on the controller (relative to the site): no control character
    ("ssh.private_key", at("ssh", "private_key"), "id\red25519", "holds a control character"),
    ("ssh.known_hosts", at("ssh", "known_hosts"), "known\thosts", "holds a control character"),
    ("bundle.public_key", at("bundle", "public_key"), "keys/\x7fpub.pem", "holds a control character"),
    ("site.tls.ca", _tls_ca, "tls/ca\n.crt", "holds a control character"),
    # versions, the join token's lifetime
    ("kubernetes.version", at("kubernetes", "version"), "1.23.17", "is not a Kubernetes release vMAJOR"),
    (
        "kubernetes.version",
        at("kubernetes", "version"),
        "v1.23.17-rc.1",
        "is not a Kubernetes release vMAJOR",
    ),
    ("kubernetes.version", at("kubernetes", "version"), "v1.23.017", "is not a Kubernetes release vMAJOR"),
    ("kubernetes.version", at("kubernetes", "version"), "v1.23.17 --ignore-preflight-errors=all", "is not a"),
    (
        "kubernetes.version",
        at("kubernetes", "version"),
        "v1.23.99",
        "is later than the 1.23 release the bundle",
    ),
    ("kubernetes.version", at("kubernetes", "version"), "v1.22.17", "is older than every release the bundle"),
    ("scheduler.version", at("scheduler", "version"), "2.9", "is not a version MAJOR.MINOR.PATCH"),
    ("scheduler.version", at("scheduler", "version"), "2.9.0;touch x", "is not a version MAJOR.MINOR.PATCH"),
    ("scheduler.version", at("scheduler", "version"), "../2.9.0", "is not a version MAJOR.MINOR.PATCH"),
    ("kubernetes.token_ttl", at("kubernetes", "token_ttl"), "0", "must be from 1m to 24h0m0s"),
    ("kubernetes.token_ttl", at("kubernetes", "token_ttl"), "0s", "must be from 1m to 24h0m0s"),
    ("kubernetes.token_ttl", at("kubernetes", "token_ttl"), "24h0m1s", "must be from 1m to 24h0m0s"),
    ("kubernetes.token_ttl", at("kubernetes", "token_ttl"), "8760h", "must be from 1m to 24h0m0s"),
    ("kubernetes.token_ttl", at("kubernetes", "token_ttl"), "30s", "must be from 1m to 24h0m0s"),
    ("kubernetes.token_ttl", at("kubernetes", "token_ttl"), "forever", "is not a duration"),
    ("kubernetes.token_ttl", at("kubernetes", "token_ttl"), "1h\nttl: 0", "is not a duration"),
    # what becomes an ssh USER@HOST word, an apt source line, a flag, a file name
    ("ssh.user", at("ssh", "user"), "-oProxyCommand=touch /tmp/x", "is not a user name"),
    ("scheduler.jumpbox.user", _jumpbox_user, "-oProxyCommand=touch", "is not a user name"),
    (
        "bundle.apt_repo_url",
        at("bundle", "apt_repo_url"),
        "http://10.77.0.1:8080/ ./\ndeb x",
        "is not an http",
    ),
    ("bundle.apt_repo_url", at("bundle", "apt_repo_url"), "file:///srv/repo", "is not an http"),
    ("bundle.apt_repo_url", at("bundle", "apt_repo_url"), "http://a_b:80/", "does not name a host"),
    ("scheduler.oidc.issuer_url", _oidc("issuer_url"), "https://idp.example/realms/x y", "is not an http"),
    ("scheduler.oidc.client_id", _oidc("client_id"), "k8s\n- --anonymous-auth=true", "holds a control"),
    ("scheduler.admin_email", at("scheduler", "admin_email"), "admin@runai.example;x", "is not an e-mail"),
    ("site.name", at("site", "name"), "../../etc/cron.d/x", "holds a '/'"),
    ("site.name", at("site", "name"), "acme\x1b]0;owned\x07", "holds a control character"),
    (
        "ssh.proxy_command",
        at("ssh", "proxy_command"),
        "nc %h %p\nLocalCommand x",
        "holds a control character",
    ),
]


@pytest.mark.parametrize(
    ("field", "put", "value", "why"), REFUSED, ids=[f"{r[0]}={r[2]!r}"[:80] for r in REFUSED]
)
def test_a_hostile_value_is_refused_in_one_line_naming_the_field(field, put, value, why) -> None:
    problems = problems_of(site_with(put, value))
    assert any(p.startswith(f"appliance.yml: {field}: {value!r} {why}") for p in problems), problems
    assert all("\n" not in p for p in problems), problems


# (field, setter, a value taken, a value of the same kind refused)
ACCEPTED = [
    # the lab acceptance: path fields holding a space and a ';' (argv all the way)
    ("nfs.path", at("nfs", "path"), "/srv/nfs/appliance;touch${IFS}/tmp/x;echo", "srv/nfs/appliance;x"),
    (
        "bundle.source",
        at("bundle", "source"),
        "/media/field eng/APPLIANCE USB/bundle",
        "APPLIANCE USB/bundle",
    ),
    (
        "bundle.master_source",
        at("bundle", "master_source"),
        "/media/root/MY STICK/bundle",
        "/media/root/MY\tSTICK",
    ),
    ("bundle.path", at("bundle", "path"), "/srv/appliance bundle/v1;2", "/srv/appliance bundle/../v1;2"),
    ("nfs.server", at("nfs", "server"), "NFS-1.Storage.example.com", "NFS_1.Storage.example.com"),
    ("nfs.server", at("nfs", "server"), "fd00:10::5", "fd00:10::5%eth0"),
    ("registry.address", at("registry", "address"), "192.168.10.11:5000", "192.168.10.11:70000"),
    ("registry.address", at("registry", "address"), "[fd00::11]:65535", "[fd00::11]:65536"),
    # the upgrade rehearsal's older bundle, and where `upgrade apply` moves a site
    ("kubernetes.version", at("kubernetes", "version"), "v1.23.16", "v1.23.16-standin"),
    ("kubernetes.version", at("kubernetes", "version"), "v1.24.17", "v1.24"),
    ("kubernetes.token_ttl", at("kubernetes", "token_ttl"), "1h", "25h"),
    ("kubernetes.token_ttl", at("kubernetes", "token_ttl"), "1m", "59s"),
    ("scheduler.version", at("scheduler", "version"), "2.13.0-rc.1", "2.13.0-rc..1"),
    (
        "bundle.apt_repo_url",
        at("bundle", "apt_repo_url"),
        "http://10.77.0.1:8080/",
        "http://10.77.0.1:8080/ ./",
    ),
    ("network.ntp_servers[0]", _one_of("network", "ntp_servers"), "ntp.example.com", "ntp example"),
]


@pytest.mark.parametrize(
    ("field", "put", "good", "bad"), ACCEPTED, ids=[f"{a[0]}={a[2]!r}" for a in ACCEPTED]
)
def test_a_well_formed_value_is_taken_and_a_malformed_one_refused(
    field: str, put, good: str, bad: str
) -> None:
    assert problems_of(site_with(put, good)) == []
    problems = problems_of(site_with(put, bad))
    assert any(p.startswith(f"appliance.yml: {field}: {bad!r} ") for p in problems), problems


def test_kubernetes_version_is_checked_against_what_the_profiles_carry(tmp_path: Path) -> None:
    """The profiles are the one list: a later patch of their minor names them in the refusal."""
    assert CARRIED in carried_kubernetes_releases()
    major_minor, patch = CARRIED.rsplit(".", 1)
    later = f"{major_minor}.{int(patch) + 1}"
    assert problems_of(site_with(at("kubernetes", "version"), CARRIED)) == []
    [problem] = problems_of(site_with(at("kubernetes", "version"), later))
    assert problem.startswith(f"appliance.yml: kubernetes.version: '{later}' is later than")
    assert f"({', '.join(carried_kubernetes_releases())})" in problem
    # a profile directory of its own: a lock beside a profile is no profile
    prof = yaml.safe_load((EXAMPLE.parents[2] / "bundles" / "profiles" / "lab.yml").read_text())
    for f in prof["files"]:
        if f["name"] in ("kubeadm", "kubelet"):
            f["version"] = "v1.25.3-standin"
        elif f["name"] == "kubectl":
            f["kubernetes"] = "v1.25.3"
    (tmp_path / "lab-125.yml").write_text(yaml.safe_dump(prof))
    (tmp_path / "lab-125.lock.yml").write_text("lock_version: 1\n")
    assert carried_kubernetes_releases(tmp_path) == ("v1.25.3",)


def test_cli_validate_refuses_a_hostile_path_with_exit_2_one_line_and_a_hint(tmp_path: Path, capsys) -> None:
    data = site_with(at("nfs", "path"), "/export/runai\n/ *(rw,no_root_squash)")
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    assert main(["config", "validate", "--site", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: {tmp_path}/appliance.yml: nfs.path: '/export/runai\\n/ *(rw,no_root_squash)' "
        "holds a control character"
    ]
    assert "hint" in err and "Traceback" not in err


# -- OIDC: prefixes by default, none refused with a groups claim ------------------------------------
def _open_oidc(**extra: Any) -> dict[str, Any]:
    oidc = {"issuer_url": "https://idp.example/realms/lab", "client_id": "k8s", **extra}
    return site_with(lambda d, v: d["scheduler"].update(stack="open", oidc=v), oidc)


def test_oidc_prefixes_default_to_oidc() -> None:
    cfg: SiteConfig = parse_site(_open_oidc(groups_claim="groups"))
    settings = oidc_settings(cfg)
    assert (settings["username_prefix"], settings["groups_claim"], settings["groups_prefix"]) == (
        "oidc:",
        "groups",
        "oidc:",
    )
    # on a runai site with no scheduler.oidc at all, the same defaults
    assert oidc_settings(parse_site(copy.deepcopy(BASE)))["username_prefix"] == "oidc:"


@pytest.mark.parametrize("prefix", [None, ""])
def test_a_groups_claim_without_a_groups_prefix_is_refused(prefix: str | None) -> None:
    problems = problems_of(_open_oidc(groups_claim="groups", groups_prefix=prefix))
    assert [p for p in problems if "groups_prefix" in p] == [
        "appliance.yml: scheduler.oidc.groups_prefix: required with groups_claim (e.g. 'oidc:'): "
        "without one, a group the identity provider names system:masters is cluster-admin"
    ]


@pytest.mark.parametrize("field", ["username_prefix", "groups_prefix"])
def test_a_prefix_into_the_system_names_is_refused(field: str) -> None:
    problems = problems_of(_open_oidc(groups_claim="groups", **{field: "system:"}))
    assert any(p.startswith(f"appliance.yml: scheduler.oidc.{field}: 'system:' would make") for p in problems)


# -- properties ----------------------------------------------------------------------------------
PATH_FIELDS = [
    ("nfs.path", at("nfs", "path")),
    ("bundle.path", at("bundle", "path")),
    ("bundle.source", at("bundle", "source")),
    ("bundle.master_source", at("bundle", "master_source")),
]
CONTROL = st.sampled_from([chr(c) for c in (*range(0x20), 0x7F)])
# path words: anything printable but '/' (spaces, ';', '$', quotes, non-ASCII included), and no
# template marker ('{{', '{%', '{#': refused in any site value, a test of its own); found by
# Hypothesis in a run of 6b1a0cf: '/{%'
WORD = st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/"), min_size=1).filter(
    lambda w: w not in (".", "..") and not any(m in w for m in ("{{", "{%", "{#"))
)
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(words=st.lists(WORD, min_size=1, max_size=4), control=CONTROL, where=st.integers(min_value=0))
@pytest.mark.parametrize(("field", "put"), PATH_FIELDS, ids=[f[0] for f in PATH_FIELDS])
def test_any_path_with_a_control_character_is_refused(field, put, words, control, where) -> None:
    good = "/" + "/".join(words)
    assert problems_of(site_with(put, good)) == [], good  # printable text is data
    at_ = 1 + where % len(good)
    bad = good[:at_] + control + good[at_:]
    problems = problems_of(site_with(put, bad))
    assert any(p.startswith(f"appliance.yml: {field}: {bad!r} holds a control character") for p in problems)
    assert all("\n" not in p for p in problems)


LABEL = st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?", fullmatch=True)
LAST = LABEL.filter(lambda label: not label.isdigit())  # an all-digit last label is a mistyped IPv4
HOST_NAME = st.builds(lambda first, last: ".".join([*first, last]), st.lists(LABEL, max_size=3), LAST).filter(
    lambda h: len(h) <= 253
)
HOSTILE = st.sampled_from([";", " ", "_", "$", "`", "\n", "/", "'", "|", "&", "%"])


@PROPERTY
@given(host=HOST_NAME, port=st.integers(min_value=1, max_value=65535), bad=HOSTILE)
def test_any_rfc1123_host_name_is_taken_and_one_with_a_hostile_character_refused(host, port, bad) -> None:
    assert problems_of(site_with(at("nfs", "server"), host)) == [], host
    assert problems_of(site_with(at("network", "ntp_servers"), [host])) == [], host
    problems = problems_of(site_with(at("registry", "address"), f"{host}:{port}"))
    assert problems == [], (host, port)
    hostile = host + bad + "x"
    assert any(
        p.startswith(f"appliance.yml: nfs.server: {hostile!r} is not an IP address or an RFC 1123 host name")
        for p in problems_of(site_with(at("nfs", "server"), hostile))
    )
    assert any(
        p.startswith(f"appliance.yml: registry.address: {hostile + ':5000'!r} ")
        for p in problems_of(site_with(at("registry", "address"), hostile + ":5000"))
    )
