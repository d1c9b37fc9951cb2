"""Pure translation of ansible-runner job events (dicts) into domain events. No I/O, so it is
tested with recorded events."""

from __future__ import annotations

from typing import Any

from appliance_cli.runner.events import (
    WARNINGS_KEY,
    Event,
    HostResult,
    HostStats,
    HostWarning,
    PlayStarted,
    TaskStarted,
)

_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


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


def translate(raw: dict[str, Any]) -> list[Event]:
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
    events: list[Event] = [
        HostResult(
            host=host,
            task=task,
            status=status,
            message=_message(res),
            ignored=bool(data.get("ignore_errors")),
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
