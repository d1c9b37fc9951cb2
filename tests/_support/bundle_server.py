"""A directory served on 127.0.0.1, standing for the master's bundle server (files/ below it), for
integration tests that run a role's download tasks against localhost."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(the files/ directory to put artifacts in, its URL)."""
    root = tmp_path / "www"
    (root / "files").mkdir(parents=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield root / "files", f"http://127.0.0.1:{srv.server_address[1]}/files"
    finally:
        srv.shutdown()
