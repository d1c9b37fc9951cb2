"""The mirror map: fetch "upstream" from somewhere else without changing what is recorded.

`--mirror HOST=URL` (repeatable, or $APPLIANCE_BUNDLE_MIRRORS, comma-separated) sends every
download whose host is HOST, and every image whose registry is HOST, to URL instead. The
profile and the lock keep the upstream URLs and references: a bundle locked through a site's
internal artifact mirror is byte-for-byte the one locked against the internet, and the lock
stays reviewable against upstream's published checksums.

    dl.k8s.io=http://127.0.0.1:8080/dl.k8s.io      files: https://dl.k8s.io/P -> .../dl.k8s.io/P
    registry.k8s.io=http://127.0.0.1:5000           images: registry.k8s.io/pause -> 127.0.0.1:5000/pause
    docker.io=https://mirror.site/hub               images: docker.io/library/x -> mirror.site/hub/library/x

An `http://` registry mirror is contacted without TLS (skopeo --tls-verify=false); `https://`
with TLS verification as usual.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from appliance_cli.errors import UsageError

ENV = "APPLIANCE_BUNDLE_MIRRORS"
_HOST = re.compile(r"[A-Za-z0-9.-]+(:\d+)?")


@dataclass(frozen=True)
class RegistryTarget:
    """Where to pull `repo` from: the docker:// reference (without tag/digest) and TLS."""

    repo: str
    tls_verify: bool


@dataclass(frozen=True)
class MirrorMap:
    entries: tuple[tuple[str, str], ...] = ()  # (upstream host, mirror base URL without trailing /)

    @classmethod
    def parse(cls, specs: list[str] | None, env: bool = True) -> MirrorMap:
        items = list(specs or [])
        if env and os.environ.get(ENV):
            items += [s for s in os.environ[ENV].split(",") if s.strip()]
        entries: dict[str, str] = {}
        for spec in items:
            host, sep, url = spec.strip().partition("=")
            parts = urlsplit(url)
            if (
                not sep
                or not _HOST.fullmatch(host)
                or parts.scheme not in ("http", "https")
                or not parts.netloc
            ):
                raise UsageError(
                    f"--mirror {spec!r}: expected HOST=URL",
                    hint="e.g. --mirror dl.k8s.io=http://127.0.0.1:8080/dl.k8s.io",
                )
            entries[host.lower()] = url.rstrip("/")
        return cls(tuple(sorted(entries.items())))

    def _base(self, host: str) -> str | None:
        return dict(self.entries).get(host.lower())

    def url(self, url: str) -> str:
        """The URL to download `url` from."""
        parts = urlsplit(url)
        base = self._base(parts.netloc)
        if base is None:
            return url
        rest = parts.path + (f"?{parts.query}" if parts.query else "")
        return base + (rest if rest.startswith("/") else "/" + rest)

    def registry(self, repo: str) -> RegistryTarget:
        """`repo` is a full repository name (registry.k8s.io/pause, docker.io/library/registry)."""
        host, _, path = repo.partition("/")
        base = self._base(host)
        if base is None:
            return RegistryTarget(repo, True)
        parts = urlsplit(base)
        prefix = parts.path.strip("/")
        target = f"{parts.netloc}/{prefix}/{path}" if prefix else f"{parts.netloc}/{path}"
        return RegistryTarget(target, parts.scheme == "https")

    def describe(self) -> list[str]:
        return [f"{h} -> {u}" for h, u in self.entries]


NO_MIRRORS = MirrorMap()
