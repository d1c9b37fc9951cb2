"""Every failure the user can act on is an ApplianceError; the CLI maps them to exit codes
in one place (appliance_cli.cli.main) and prints them as one line plus a hint."""

from __future__ import annotations


class ApplianceError(Exception):
    """A failure with a one-line message, an exit code and an optional hint."""

    exit_code = 1
    # A failed ansible run's RunResult (the runner's type; this module imports nothing): the CLI
    # prints its recap and warnings before the error line, so the nodes that finished show.
    run_result: object | None = None

    def __init__(self, message: str, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(ApplianceError):
    """The site config (appliance.yml) is malformed. Carries one line per problem."""

    exit_code = 2

    def __init__(self, problems: list[str], hint: str | None = None):
        super().__init__(problems[0] if problems else "invalid site config", hint)
        self.problems = problems or [self.message]


class UsageError(ApplianceError):
    exit_code = 2


class PrerequisiteError(ApplianceError):
    """Something the host (or a node) needs is missing: root, a package, a kernel feature."""

    exit_code = 3


class BundleError(ApplianceError):
    """The offline bundle is incomplete, corrupt, unsigned or tampered with."""

    exit_code = 4


class RunFailed(ApplianceError):
    """An ansible run finished with failed or unreachable hosts."""

    exit_code = 5


class StateFileError(ApplianceError):
    """A resumable state file on a node (an upgrade's, a restore's) is corrupt or of a newer schema."""


class LabError(ApplianceError):
    """The rehearsal lab could not be brought up, inspected or torn down."""

    exit_code = 6


class Unreachable(ApplianceError):
    """A node does not answer over SSH, the cluster's API server does not answer, or the lab is not up."""

    exit_code = 7


class Degraded(ApplianceError):
    """A status command reached everything it asked, and not all is well (a node missing, NotReady, down)."""

    exit_code = 8


class Cancelled(ApplianceError):
    exit_code = 130
