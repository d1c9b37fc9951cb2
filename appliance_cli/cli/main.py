"""Entry point of the `appliance` command: parses arguments, dispatches to a command module and
turns every ApplianceError into its exit code and a one-line message. No tracebacks for user errors."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from appliance_cli import __version__
from appliance_cli.cli import (
    acceptance_cmd,
    backup_cmd,
    bundle_cmd,
    cluster_cmd,
    completion_cmd,
    diagnose_cmd,
    install_cmd,
    integrations_cmd,
    lab_cmd,
    node_cmd,
    preflight_cmd,
    rebuild_cmd,
    restore_cmd,
    site_cmd,
    support_cmd,
    ui,
    upgrade_cmd,
    user_cmd,
)
from appliance_cli.errors import ApplianceError, ConfigError

COMMAND_MODULES = (
    site_cmd,
    preflight_cmd,
    install_cmd,
    diagnose_cmd,
    acceptance_cmd,
    cluster_cmd,
    user_cmd,
    node_cmd,
    upgrade_cmd,
    backup_cmd,
    restore_cmd,
    rebuild_cmd,
    support_cmd,
    integrations_cmd,
    bundle_cmd,
    lab_cmd,
    completion_cmd,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="appliance",
        description="Provision an air-gapped GPU appliance from an offline bundle.",
    )
    parser.add_argument("--version", action="version", version=f"appliance {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for unexpected errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def _escape_unencodable_output() -> None:
    """A value read from a file may hold a lone surrogate (JSON's "\\ud800", YAML's "\\uD800"):
    printed, it is escaped as Python's own stderr does, never a UnicodeEncodeError on stdout (an
    unexpected error, exit 70) or inside the error handler below (a traceback)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):  # a stream that cannot change (closed)
                reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    _escape_unencodable_output()
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or bool(os.environ.get("APPLIANCE_DEBUG"))
    try:
        return int(args.handler(args) or 0)
    except ConfigError as exc:
        for line in exc.problems:
            ui.error(line)
        if exc.hint:
            ui.show_hint(exc.hint)
        return exc.exit_code
    except ApplianceError as exc:
        ui.error(exc.message, exc.hint)
        return exc.exit_code
    except KeyboardInterrupt:
        ui.error("interrupted")
        return 130
    except Exception as exc:  # the one place an unexpected error becomes an exit code
        if debug:
            raise
        ui.error(f"unexpected {type(exc).__name__}: {exc}", "re-run with --debug and report the traceback")
        return 70


if __name__ == "__main__":
    sys.exit(main())
