"""Where the packaged Ansible content lives: inside the wheel (appliance_cli/content/)
or, in a source checkout, at the repository root."""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from pathlib import Path


@cache
def content_root() -> Path:
    packaged = Path(str(files("appliance_cli"))) / "content"
    if (packaged / "playbooks").is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent


def playbooks_dir() -> Path:
    return content_root() / "playbooks"


# The callback the runner enables (callback_plugins/<name>.py; its CALLBACK_NAME is the same)
JINJA_WARM_CALLBACK = "appliance_jinja_warm"


def callback_plugins_dir() -> Path:
    return playbooks_dir() / "callback_plugins"


def roles_dir() -> Path:
    return content_root() / "roles"


def templates_dir() -> Path:
    return content_root() / "templates"


def inventories_dir() -> Path:
    return content_root() / "inventories"


def profiles_dir() -> Path:
    return content_root() / "bundles" / "profiles"


def values_dir() -> Path:
    """The appliance's values per chart version (the gpu_operator role's gpu_operator_values_dir)."""
    return content_root() / "bundles" / "values"


def ansible_cfg() -> Path:
    return content_root() / "ansible.cfg"
