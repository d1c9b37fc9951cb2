"""Pure translation of ansible-runner job events (dicts) into domain events. No I/O, so it is
tested with recorded events."""

from __future__ import annotations

import re
from typing import Any

from appliance_cli.runner.events import (
    FAILURE_KIND_KEY,
    WARNINGS_KEY,
    Event,
    HostResult,
    HostStats,
    HostStatus,
    HostWarning,
    PlayStarted,
    TaskStarted,
)

_RESULT_EVENTS: dict[str, HostStatus] = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


# get_url's words when a download does not match its `checksum:` (the path is its temporary file).
GET_URL_CHECKSUM = re.compile(
    r"The checksum for (\S+) did not match ([0-9a-f]{32,128}); it was ([0-9a-f]{32,128})\."
)
# The failure kind of such a result: the bytes a node downloaded are not the ones the task pinned.
CHECKSUM_KIND = "checksum"


def _failure(res: dict[str, Any], action: str) -> tuple[str, str]:
    """(kind, message) of a failed result: the module's own kind (FAILURE_KIND_KEY), or get_url's
    checksum mismatch, whose message then names the URL instead of get_url's temporary file."""
    message = _message(res)
    own = str(res.get(FAILURE_KIND_KEY) or "")
    m = GET_URL_CHECKSUM.search(message)
    if own or not m or action.rsplit(".", 1)[-1] not in ("get_url", ""):
        return own, message
    url = str(res.get("url") or m.group(1))
    return CHECKSUM_KIND, message[: m.start(1)] + url + message[m.end(1) :]


def _message(res: dict[str, Any]) -> str:
    """The most useful one-line reason a module gives for failing."""
    failed_items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    if failed_items:  # a loop: "One or more items failed" says nothing; name the first item that did
        first = failed_items[0]
        label = first.get("_ansible_item_label", first.get("item", "?"))
        more = f" (+{len(failed_items) - 1} more items)" if len(failed_items) > 1 else ""
        return f"item {label}: {_message(first) or 'failed'}{more}"
    if res.get("censored"):  # no_log: Ansible dropped the reason with the secrets
        return "details hidden: the task handles secrets (no_log); the node's own logs say more"
    for key in ("msg", "stderr", "reason", "stdout"):
        value = res.get(key)
        if value:
            text = str(value).strip()
            return text.splitlines()[-1] if key in ("stderr", "stdout") else " ".join(text.split())
    return ""


# What ssh says when it cannot reach a node, and what that means for the person at the rack.
_SSH_CAUSES = (
    ("No route to host", "no route to host: the node is down or the network path to it is broken"),
    ("Connection refused", "connection refused: the node answers but nothing listens on its SSH port"),
    ("timed out", "connection timed out: the node is down or a firewall drops the traffic"),
    (
        "Connection closed by remote host",
        "connection closed during the SSH handshake: sshd refuses connections",
    ),
    ("Connection reset", "connection reset during the SSH handshake: sshd refuses connections"),
    ("Permission denied", "authentication failed: check ssh.user and ssh.private_key"),
    (
        "Host key verification failed",
        "its host key does not match known_hosts (`appliance hosts trust` after checking)",
    ),
    ("Could not resolve hostname", "its name does not resolve"),
)
_ADDRESS = re.compile(
    r'(?:connect to host |connect to |remote host "|Connection closed by )\[?([0-9A-Fa-f.:]+?)\]?(?:"| port )'
)


# What Mitogen says when the connection under a running task dies (a cable pulled, a node
# powered off mid-run): the node became unreachable, whatever the task was doing.
_CONNECTION_LOST = (
    "the respondent Context has disconnected",
    "Mitogen was disconnected from",
    "EOF on stream",
    # a link cut while Mitogen (re)connects, e.g. during fact gathering (seen in the lab, CI-style
    # check at 8e096b5: worker1 cut 10 s into an install was reported as a failed task)
    "Channel was disconnected while connection attempt was in progress",
)
# Said in plain words: Mitogen's own ("please file a bug") stays in the run's artifacts.
LOST_MID_RUN = "SSH connection lost during the run: the node went down, rebooted, or its network path broke"


def unreachable_cause(message: str) -> tuple[str, str]:
    """(address, cause) of an unreachable result: ssh's words turned into what they mean, and
    Mitogen's (a connection lost under a running task) said plainly."""
    m = _ADDRESS.search(message)
    cause = next((f"{meaning} (ssh: {words})" for words, meaning in _SSH_CAUSES if words in message), "")
    if not cause and any(words in message for words in _CONNECTION_LOST):
        cause = LOST_MID_RUN
    return (m.group(1) if m else ""), cause or (message.strip().splitlines() or [""])[-1]


def _unreachable(
    res: dict[str, Any], host: str, task: str, names: dict[str, str], ignored: bool
) -> HostResult:
    """One result naming the node that could not be reached: for a delegated task that is the
    delegation's target (found by its address), not the node that ran the task."""
    items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("unreachable")]
    address, cause = unreachable_cause(str((items[0] if items else res).get("msg", "")))
    # A no_log task's result is censored: no words, and a delegated one names only the node that
    # delegated it. No address then: whose connection failed is found out afterwards.
    censored = "censored" in res and not items
    if censored:
        cause = "the task's output is hidden (no_log), ssh's words with it"
    # ssh's words named no address ("Connection closed by remote host"): the node's own
    if not address and not censored:
        address = next((a for a, name in names.items() if name == host), "")
    return HostResult(host=names.get(address, host), task=task, status="unreachable", message=cause,
                      ignored=ignored, address=address)  # fmt: skip


def _lost_connection(
    res: dict[str, Any], host: str, task: str, names: dict[str, str], ignored: bool
) -> HostResult | None:
    """A task failed because its connection died: an unreachable result for the node at the other
    end, which is the delegation's target when the task was delegated (master1 pulling on worker1)."""
    if not any(words in _message(res) for words in _CONNECTION_LOST):
        return None
    delegated = res.get("_ansible_delegated_vars") or {}
    target = str(delegated.get("ansible_delegated_host") or "") or host
    address = str(delegated.get("ansible_host") or "")
    return HostResult(host=names.get(address, target), task=task, status="unreachable",
                      message=LOST_MID_RUN, ignored=ignored, address=address)  # fmt: skip


def translate(raw: dict[str, Any], names: dict[str, str] | None = None) -> list[Event]:
    kind = raw.get("event")
    data = raw.get("event_data") or {}
    if kind == "playbook_on_play_start":
        return [PlayStarted(name=data.get("play", "") or data.get("name", ""))]
    if kind == "playbook_on_task_start":
        return [TaskStarted(name=data.get("task", ""), role=data.get("role"))]
    status = _RESULT_EVENTS.get(kind or "")
    if status is None:
        return []
    res = data.get("res") or {}
    task = data.get("task", "")
    host = data.get("host", "?")
    if status == "ok" and res.get("changed"):
        status = "changed"
    if status == "unreachable":
        return [_unreachable(res, host, task, names or {}, bool(data.get("ignore_errors")))]
    if status == "failed" and (
        lost := _lost_connection(res, host, task, names or {}, bool(data.get("ignore_errors")))
    ):
        return [lost]
    kind, message = (
        _failure(res, str(data.get("task_action") or "")) if status == "failed" else ("", _message(res))
    )
    events: list[Event] = [
        HostResult(
            host=host,
            task=task,
            status=status,
            message=message,
            ignored=bool(data.get("ignore_errors")),
            kind=kind,
        )
    ]
    if status in ("ok", "changed"):
        events += [HostWarning(host=host, message=m) for m in _warnings(res)]
    return events


def _warnings(res: dict[str, Any]) -> list[str]:
    """The messages under WARNINGS_KEY, of the result and of each loop item's result."""
    found: list[str] = []
    for r in [res, *(r for r in res.get("results") or [] if isinstance(r, dict))]:
        msgs = r.get(WARNINGS_KEY)
        found += [str(m) for m in (msgs if isinstance(msgs, list) else [msgs]) if m]
    return found


def stats_from_event(raw: dict[str, Any]) -> dict[str, HostStats] | None:
    """The playbook_on_stats event carries the final per-host recap."""
    if raw.get("event") != "playbook_on_stats":
        return None
    data = raw.get("event_data") or {}
    hosts: dict[str, HostStats] = {}
    for field_name, attr in (
        ("ok", "ok"),
        ("changed", "changed"),
        ("failures", "failed"),
        ("dark", "unreachable"),
        ("skipped", "skipped"),
    ):
        for host, n in (data.get(field_name) or {}).items():
            hosts.setdefault(host, HostStats())
            setattr(hosts[host], attr, int(n))
    return hosts
