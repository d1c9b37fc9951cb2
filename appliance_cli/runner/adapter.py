"""The only module that imports ansible_runner. One private_data_dir per run; job events are
translated into domain events and handed to a callback; nothing parses stdout."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance_cli.content import JINJA_WARM_CALLBACK, ansible_cfg, callback_plugins_dir, roles_dir
from appliance_cli.errors import Cancelled, PrerequisiteError
from appliance_cli.runner.events import Event, HostResult, HostStats, HostWarning, RunRequest, RunResult
from appliance_cli.runner.translate import stats_from_event, translate


def _cmdline(req: RunRequest) -> str:
    """ansible-runner's `cmdline`, which it splits with shlex.split: each part one word, quoted."""
    parts = []
    if req.options.check:
        parts.append("--check")
    if req.options.diff:
        parts.append("--diff")
    if req.options.skip_tags:
        parts.append(f"--skip-tags={req.options.skip_tags}")
    return shlex.join(parts)


def control_path_dir(site_dir: Path) -> str:
    key = hashlib.sha256(str(site_dir.resolve()).encode()).hexdigest()[:12]
    return f"/tmp/appliance-cp-{os.getuid()}-{key}"


def _envvars(req: RunRequest) -> dict[str, str]:
    home = req.private_data_dir.parent / ".ansible-home"
    env = {
        "ANSIBLE_CONFIG": str(ansible_cfg()),
        "ANSIBLE_ROLES_PATH": str(roles_dir()),
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        # ControlPath sockets must stay short (108-byte limit): keep them out of deep state dirs.
        # One directory per site: ssh names the socket after user@host:port only, so two sites
        # (or two labs) with the same node addresses would share a master connection: a run
        # against one would silently act on the other's nodes, past its known_hosts.
        "ANSIBLE_SSH_CONTROL_PATH_DIR": control_path_dir(req.inventory.parent),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        # ansible-runner defaults this to False; host keys are always verified here.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "PATH": _path_with_our_ansible(),
        # Filter and test plugins loaded once in the main process, not again in every worker it
        # forks (controller CPU). ansible-runner appends its own directory.
        "ANSIBLE_CALLBACK_PLUGINS": str(callback_plugins_dir()),
        "ANSIBLE_CALLBACKS_ENABLED": JINJA_WARM_CALLBACK,
    }
    if req.mitogen:
        # Mitogen keeps one Python per node and runs each module in it: no interpreter start and
        # no module_utils import per task, which is most of what a no-op run costs.
        env["ANSIBLE_STRATEGY_PLUGINS"] = mitogen_strategy_dir()
        env["ANSIBLE_STRATEGY"] = "mitogen_linear"
    env.update(req.envvars)
    return env


def mitogen_strategy_dir() -> str:
    """Mitogen's strategy plugins, found without importing it (that needs ansible loaded)."""
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or not spec.submodule_search_locations:
        raise PrerequisiteError(
            "mitogen is not installed next to this toolkit (python package ansible_mitogen)",
            hint="reinstall the toolkit from the bundle (install-toolkit.sh), "
            "or set ssh.mitogen: false in appliance.yml to run over plain ssh",
        )
    return str(Path(next(iter(spec.submodule_search_locations))) / "plugins" / "strategy")


def _path_with_our_ansible() -> str:
    """ansible-playbook from the same environment as this CLI comes first (a venv need not be active)."""
    path = os.environ.get("PATH", "/usr/bin:/bin")
    bindir = str(Path(sys.executable).parent)
    return path if path.split(os.pathsep)[0] == bindir else bindir + os.pathsep + path


class AnsibleRunner:
    """Implements the core's RunnerPort with ansible-runner."""

    def run(self, req: RunRequest, on_event: Callable[[Event], None]) -> RunResult:
        import ansible_runner  # imported here so `appliance --help` stays fast

        req.private_data_dir.mkdir(parents=True, exist_ok=True)
        failures: list[HostResult] = []
        warnings: list[HostWarning] = []
        stats: dict[str, HostStats] = {}
        cancel = threading.Event()

        def handle(raw: dict[str, Any]) -> bool:
            final = stats_from_event(raw)
            if final is not None:
                stats.update(final)
            for ev in translate(raw, req.node_names):
                if isinstance(ev, HostResult) and ev.status in ("failed", "unreachable") and not ev.ignored:
                    failures.append(ev)
                if isinstance(ev, HostWarning):
                    warnings.append(ev)
                on_event(ev)
            return True  # keep the event in the artifacts

        previous = None
        if threading.current_thread() is threading.main_thread():
            # Ctrl-C asks ansible-runner to stop the playbook cleanly instead of killing the CLI mid-run.
            previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
        t0 = time.monotonic()
        try:
            r = ansible_runner.run(
                private_data_dir=str(req.private_data_dir),
                playbook=str(req.playbook),
                inventory=str(req.inventory),
                extravars=req.extravars or None,
                limit=req.options.limit,
                tags=req.options.tags,
                cmdline=_cmdline(req) or None,
                verbosity=req.options.verbosity or None,
                envvars=_envvars(req),
                event_handler=handle,
                cancel_callback=cancel.is_set,
                quiet=True,
                rotate_artifacts=20,
                suppress_env_files=True,
            )
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        elapsed = time.monotonic() - t0
        artifact_dir = Path(r.config.artifact_dir)
        if cancel.is_set() or r.status == "canceled":
            raise Cancelled(
                f"run cancelled; artifacts kept in {artifact_dir}",
                hint="re-run the same command: every role is idempotent",
            )
        return RunResult(
            status=r.status,
            rc=int(r.rc or 0),
            stats=stats,
            artifact_dir=artifact_dir,
            failures=failures,
            warnings=warnings,
            elapsed=elapsed,
        )
