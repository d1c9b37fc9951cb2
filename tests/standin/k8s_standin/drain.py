"""kubectl drain's wait for the pods it evicted (kubectl/pkg/drain: waitForDelete)."""

from __future__ import annotations

import time
from typing import Any, TextIO

from .apiserver import res_path
from .client import ApiClient, ApiError
from .util import now, parse_rfc3339


def _still_there(client: ApiClient, pod: dict, skip: int, out: TextIO) -> bool:
    md = pod["metadata"]
    try:
        cur: dict[str, Any] = client.get(res_path("", "v1", "pods", md["namespace"], md["name"]))
    except ApiError as e:
        if e.code == 404:
            return False
        raise
    if cur["metadata"].get("uid") != md.get("uid"):
        return False  # deleted, and another pod took its name
    stamp = cur["metadata"].get("deletionTimestamp")
    if skip > 0 and stamp and now() - parse_rfc3339(stamp) > skip:
        out.write(f'pod "{md["name"]}" has DeletionTimestamp older than {skip} seconds, skipping\n')
        return False
    return True


def wait_deleted(client: ApiClient, pods: list[dict], skip: int, timeout: float, out: TextIO) -> str:
    """Wait until each evicted pod is gone (its kubelet confirms the delete), skipping a pod whose
    deletionTimestamp is older than `skip` seconds (--skip-wait-for-delete-timeout, 0: never), up
    to `timeout` seconds (--timeout, 0: forever). The name of a pod still there at the timeout, else ""."""
    end = time.monotonic() + timeout if timeout else float("inf")
    left = list(pods)
    while left:
        left = [p for p in left if _still_there(client, p, skip, out)]
        if left and time.monotonic() > end:
            return str(left[0]["metadata"]["name"])
        if left:
            time.sleep(1)
    return ""
