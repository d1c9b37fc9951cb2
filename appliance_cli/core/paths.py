"""The paths on the nodes that the CLI and the roles both read, from their one definition: the
defaults of the defaults-only role appliance_paths (roles/appliance_paths/defaults/main.yml), which
every role that reads one lists as a meta dependency. Read once, checked, typed; no printing."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path

from appliance_cli import yamlfile
from appliance_cli.content import roles_dir
from appliance_cli.errors import ApplianceError

PREFIX = "appliance_paths_"
# An absolute path of plain segments: no '..', no empty segment, no space or shell character.
_ABSOLUTE = re.compile(r"(?:/(?!\.\.?(?:/|$))[A-Za-z0-9._+-]+)+")


@dataclass(frozen=True)
class Paths:
    """Each field is the variable appliance_paths_<field>."""

    admin_conf: str
    kubelet_conf: str
    containerd_config: str
    docker_daemon: str
    kubelet_config: str
    cni_conf_dir: str
    kubelet_auth: str
    registry_ca: str
    registry_password: str
    upgrade_state: str
    upgrade_values: str
    backups: str
    restore_state: str


def contract_file() -> Path:
    return roles_dir() / "appliance_paths" / "defaults" / "main.yml"


def parse(data: object, where: str = "roles/appliance_paths/defaults/main.yml") -> Paths:
    """The contract from its defaults file's data: exactly the fields of Paths, each absolute."""
    if not isinstance(data, dict):
        raise ApplianceError(f"{where}: not a mapping of {PREFIX}* paths")
    want = names()
    if set(data) != want:
        odd = sorted(map(str, set(data) ^ want))
        raise ApplianceError(f"{where}: the paths contract names {', '.join(odd)} on one side only")
    for name, value in sorted(data.items()):
        if not isinstance(value, str) or not _ABSOLUTE.fullmatch(value):
            raise ApplianceError(f"{where}: {name}: {value!r} is not an absolute path")
    return Paths(**{name.removeprefix(PREFIX): value for name, value in data.items()})


@cache
def load() -> Paths:
    path = contract_file()
    try:
        data = yamlfile.read(path)
    except (OSError, yamlfile.YamlError) as e:
        raise ApplianceError(f"{path}: {e}") from e
    return parse(data)


def names() -> frozenset[str]:
    """The contract's own variable names (appliance_paths_*)."""
    return frozenset(PREFIX + f.name for f in fields(Paths))


PATHS = load()
