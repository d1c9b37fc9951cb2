#!/usr/bin/python3
"""A chart archive of the bundle on the master, in one round trip: the chart and values
directories, the archive fetched from the master's bundle server and checked against the
manifest's sha256 (kept only when it matches), then `helm show chart` (and, when asked, `helm show
values`) read back for the controller to check. Before this module the same took four tasks (a
file loop, get_url, a set_fact, a command) and each including role a fifth (`helm show values`);
a no-op run now pays one task start per chart.

A mismatch fails in get_url's own words ("The checksum for URL did not match WANT; it was GOT.")
with the failure kind `checksum`, which `appliance install` turns into a bundle error naming the
blob to remove. Stdlib only (files through module_utils/node_files.py)."""

from __future__ import annotations

import hashlib
import os
import re
import urllib.request
from typing import Any

from ansible.module_utils.bundle_manifest import sha256_of
from ansible.module_utils.node_files import owned, write_atomically

DOCUMENTATION = r"""
module: helm_chart
short_description: A chart archive of the bundle on the master, checked by sha256 and read by helm
description:
  - Creates C(chart_dir) (0755) and C(values_dir) (0700), root-owned, or repairs their mode.
  - Keeps C(chart_dir)/basename(C(url)) as the archive whose sha256 is C(sha256) (root 0644). A
    missing or different file is fetched from C(url) (no proxy) and written atomically only when it
    matches; else the task fails in get_url's words with C(appliance_failure=checksum).
  - Reads C(helm show chart) and, with C(show_values), C(helm show values) of the archive.
  - In check mode it writes nothing; when the archive is not yet there it reads nothing and
    returns C(metadata) and C(chart_values) as null.
options:
  name: {type: str, required: true, description: The bundle's chart artifact (named in errors).}
  url: {type: str, required: true, description: Where the master's bundle server serves it (http or https).}
  sha256: {type: str, required: true, description: The manifest's sha256 of the archive.}
  chart_dir: {type: path, required: true, description: Where chart archives are kept.}
  values_dir: {type: path, required: true, description: Where the releases' values are kept (0700).}
  show_values: {type: bool, default: false, description: Also return the chart's own values.}
  timeout: {type: int, default: 60, description: Seconds the fetch may take.}
"""

RETURN = r"""
name: {description: The chart artifact (release.yml skips a chart its includer already read)., type: str}
path: {description: The archive on the master., type: str}
fetched: {description: Whether the archive was (or in check mode would be) fetched., type: bool}
metadata: {description: "`helm show chart` (Chart.yaml), null in check mode before the archive exists.", type: str}
chart_values: {description: "`helm show values` with show_values, else null (not `values`: Jinja would read dict.values).", type: str}
"""

SHA256 = re.compile(r"[0-9a-f]{64}")
# a chart archive as the bundle names it: NAME-VERSION.tgz, no path
ARCHIVE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\.tgz")
URL = re.compile(r"https?://[^\s/]+/\S*")
CHECKSUM_KIND = "checksum"  # appliance_cli/runner/translate.py's kind for a download that does not match


def holds(path: str, sha256: str) -> bool:
    """The file is there and its sha256 is `sha256` (hex)."""
    try:
        return sha256_of(path) == f"sha256:{sha256}"
    except FileNotFoundError:
        return False


def directory(path: str, mode: int, check: bool) -> bool:
    """PATH is a root-owned directory of MODE; True when it was (or would be) created or repaired."""
    if os.path.isdir(path):
        return owned(path, 0, mode, check)
    if not check:
        os.makedirs(path, mode=mode, exist_ok=True)
        owned(path, 0, mode, check)
    return True


def fetch(url: str, timeout: int) -> bytes:
    # no proxy from the environment: the bundle server is on the site's own network
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as r:
        return r.read()


def _helm(module: Any, *argv: str) -> str:
    rc, out, err = module.run_command(["helm", *argv])
    if rc != 0:
        module.fail_json(msg=f"helm {' '.join(argv[:2])} of chart {module.params['name']} failed (rc {rc}): "
                         f"{err.strip() or out.strip()}")  # fmt: skip
    return out


def converge(module: Any) -> dict[str, Any]:
    p, check = module.params, module.check_mode
    want = p["sha256"]
    if not SHA256.fullmatch(want):
        module.fail_json(msg=f"chart {p['name']}: sha256 {want!r} is not a sha256 digest")
    if not URL.fullmatch(p["url"]):
        module.fail_json(msg=f"chart {p['name']}: url {p['url']!r} is not an http(s) URL")
    archive = p["url"].rsplit("/", 1)[-1]
    if not ARCHIVE.fullmatch(archive):
        module.fail_json(msg=f"chart {p['name']}: {archive!r} is not a chart archive name (NAME-VERSION.tgz)")
    changed = directory(p["chart_dir"], 0o755, check)
    changed = directory(p["values_dir"], 0o700, check) or changed
    path = os.path.join(p["chart_dir"], archive)
    present = holds(path, want)
    fetched = not present
    if fetched and not check:
        data = fetch(p["url"], p["timeout"])
        got = hashlib.sha256(data).hexdigest()
        if got != want:  # get_url's words, so the CLI names the blob the same way
            module.fail_json(msg=f"The checksum for {p['url']} did not match {want}; it was {got}.",
                             url=p["url"], appliance_failure=CHECKSUM_KIND)  # fmt: skip
        write_atomically(path, data, 0o644)
    elif present:
        changed = owned(path, 0, 0o644, check) or changed
    readable = not (check and fetched)
    metadata = _helm(module, "show", "chart", path) if readable else None
    values = _helm(module, "show", "values", path) if readable and p["show_values"] else None
    return {"changed": changed or fetched, "name": p["name"], "path": path, "fetched": fetched,
            "metadata": metadata, "chart_values": values}  # fmt: skip


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "sha256": {"type": "str", "required": True},
            "chart_dir": {"type": "path", "required": True},
            "values_dir": {"type": "path", "required": True},
            "show_values": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**converge(module))
    except OSError as exc:  # urllib's URLError and HTTPError are OSErrors
        module.fail_json(msg=f"chart {module.params['name']}: {module.params['url']}: {exc}")


if __name__ == "__main__":
    main()
