#!/usr/bin/python3
"""A release's images pulled ahead on one node through the CRI, in one task: `crictl images -o
json` once (a reference it lists exactly is present), `crictl inspecti` for the others, and
`crictl pull` for what is absent, with the runtime's registry CA and credentials as the kubelet
would use them. Each crictl call is an argv list: an image reference never reaches a shell.

An image that cannot be pulled fails the task in one line naming the node, the release, the
registry and crictl's reason for each image, before helm runs (not a pod in ImagePullBackOff
later). Before this module the same took two tasks (a shell script and an assert on its lines).
Changed only when something was pulled; check mode pulls nothing and reports what is absent.
Stdlib only."""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any

DOCUMENTATION = r"""
module: cri_images_pulled
short_description: Images pulled ahead on a node through the CRI (crictl), or one line naming what is missing
description:
  - Lists the node's images once (C(crictl images -o json)); a reference named exactly as a repoTag
    or repoDigest there is present. Any other is asked about (C(crictl inspecti)), then pulled.
  - Fails naming C(node), C(release), C(registry) and crictl's reason for each image it could not pull.
  - In check mode it pulls nothing and returns the absent images.
options:
  images: {type: list, elements: str, required: true, description: References in the private registry.}
  node: {type: str, required: true, description: The node this runs on (named in the failure).}
  release: {type: str, required: true, description: Whose images these are (named in the failure).}
  registry: {type: str, required: true, description: The registry they come from (named in the failure).}
"""

RETURN = r"""
present: {description: References the node already held., type: list}
pulled: {description: References pulled by this run., type: list}
absent: {description: References check mode would pull., type: list}
missing: {description: "References crictl could not pull, each as 'REF REASON'.", type: list}
"""

# crictl lives in /usr/local/bin (kube_binaries' install path): a PATH under sudo may not hold it
CRICTL_DIRS = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REASON_CHARS = 300
# crictl logs through logrus' text formatter, non-tty: `time="…" level=fatal msg="…"`, the msg
# quoted with Go's %q (sirupsen/logrus text_formatter.go, appendValue, at 01105720).
LOGRUS_LINE = re.compile(r'time="[^"]*" level=(\w+) msg=("(?:[^"\\]|\\.)*"|\S*).*')


def crictl() -> str | None:
    return shutil.which("crictl", path=f"{os.environ.get('PATH', '')}:{CRICTL_DIRS}")


def listed(module: Any, exe: str) -> set[str]:
    """Every repoTag and repoDigest the node's runtime lists; empty when the listing fails."""
    rc, out, _ = module.run_command([exe, "images", "-o", "json"])
    if rc != 0:
        return set()
    try:
        images = json.loads(out).get("images") or []
    except (ValueError, AttributeError):
        return set()
    return {
        ref
        for i in images
        if isinstance(i, dict)
        for ref in (i.get("repoTags") or []) + (i.get("repoDigests") or [])
    }


def reason_of(text: str) -> str:
    """crictl's reason in one line: the fatal line's msg unquoted (else the last logrus line's, else
    the whole text), its whitespace folded; when long, its head and its end, where the cause is."""
    lines = [m for m in (LOGRUS_LINE.fullmatch(ln.strip()) for ln in text.splitlines()) if m]
    fatal = [m for m in lines if m[1] == "fatal"] or lines
    msg = text
    if fatal:
        msg = fatal[-1][2]
        if msg.startswith('"'):
            try:
                msg = json.loads(msg)  # %q's escapes for printable text are JSON's
            except ValueError:
                msg = msg[1:-1]
    reason = " ".join(msg.split())
    if len(reason) > REASON_CHARS:
        reason = f"{reason[:100]} … {reason[-(REASON_CHARS - 103) :]}"
    return reason


def converge(module: Any, exe: str) -> dict[str, Any]:
    p = module.params
    known = listed(module, exe)
    out: dict[str, list[str]] = {"present": [], "pulled": [], "absent": [], "missing": []}
    for ref in p["images"]:
        if ref in known or module.run_command([exe, "inspecti", ref])[0] == 0:
            out["present"].append(ref)
        elif module.check_mode:
            out["absent"].append(ref)
        else:
            rc, pulled, err = module.run_command([exe, "pull", ref])
            if rc == 0:
                out["pulled"].append(ref)
            else:
                reason = reason_of(err) or reason_of(pulled) or f"crictl pull exited {rc}"
                out["missing"].append(f"{ref} {reason}")
    if out["missing"]:
        module.fail_json(
            msg=f"{p['node']} could not pull {len(out['missing'])} image(s) of {p['release']} from {p['registry']}: "
            f"{'; '.join(out['missing'])} — the private registry lacks them: the whole install (no --tags) seeds it "
            "again from the bundle; if the bundle lacks them too, add them to the profile's images and rebuild",
            **out,
        )
    return {"changed": bool(out["pulled"]), **out}


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "images": {"type": "list", "elements": "str", "required": True},
            "node": {"type": "str", "required": True},
            "release": {"type": "str", "required": True},
            "registry": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    exe = crictl()
    if exe is None:
        module.fail_json(msg=f"{module.params['node']}: crictl not found (kube_binaries installs it): cannot pull the "
                         f"images of {module.params['release']}")  # fmt: skip
    module.exit_json(**converge(module, exe))


if __name__ == "__main__":
    main()
