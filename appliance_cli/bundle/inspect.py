"""`bundle inspect`: what is in a bundle, how big, how much layer sharing saves."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from appliance_cli.bundle.model import SIGNATURE, Artifact, load_manifest


@dataclass
class Inspection:
    path: Path
    profile: str
    created: str
    signed: bool
    artifacts: list[Artifact]
    logical_bytes: int  # sum of every artifact's files, shared blobs counted once per artifact
    unique_bytes: int  # what the blobs take on the stick
    unique_blobs: int
    test_only: int

    @property
    def dedup_ratio(self) -> float:
        return self.logical_bytes / self.unique_bytes if self.unique_bytes else 1.0

    def by_kind(self) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for a in self.artifacts:
            n, size = out.get(a.kind, (0, 0))
            out[a.kind] = (n + 1, size + a.size)
        return out


def inspect_bundle(path: Path | str) -> Inspection:
    root = Path(path)
    manifest, _ = load_manifest(root)
    owners = manifest.blob_owners()
    return Inspection(
        path=root,
        profile=manifest.profile,
        created=manifest.created,
        signed=(root / SIGNATURE).exists(),
        artifacts=manifest.artifacts,
        logical_bytes=sum(a.size for a in manifest.artifacts),
        unique_bytes=sum(size for size, _ in owners.values()),
        unique_blobs=len(owners),
        test_only=sum(1 for a in manifest.artifacts if a.test_only),
    )
