"""Where the Run:ai backend keeps its own data: each PersistentVolumeClaim of its namespace and
the volume behind it. Run:ai's disaster-recovery guidance for self-hosted control planes is to
back up the PVs of its PostgreSQL database and its metrics; the backup records them so that the
operator knows which directories (on an NFS share: server and path) hold that data.

Pure, so the unit tests need no cluster.
"""

from __future__ import annotations

from typing import Any


def _source(pv: dict[str, Any]) -> str:
    """A PersistentVolume's spec -> where its data lives, in words an operator can act on."""
    spec = pv.get("spec") or {}
    if "nfs" in spec:
        nfs = spec["nfs"] or {}
        return f"nfs {nfs.get('server', '?')}:{nfs.get('path', '?')}"
    if "hostPath" in spec:
        return f"hostPath {(spec['hostPath'] or {}).get('path', '?')}"
    if "local" in spec:
        nodes = [
            v
            for term in (
                ((spec.get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms") or []
            )
            for expr in term.get("matchExpressions") or []
            for v in expr.get("values") or []
        ]
        where = f" on {', '.join(nodes)}" if nodes else ""
        return f"local {(spec['local'] or {}).get('path', '?')}{where}"
    if "csi" in spec:
        csi = spec["csi"] or {}
        return f"csi {csi.get('driver', '?')} {csi.get('volumeHandle', '?')}"
    return "a volume of a kind this backup does not name"


def volumes(pvcs: dict[str, Any], pvs: dict[str, Any]) -> list[dict[str, str]]:
    """`kubectl get pvc -n NS -o json` and `kubectl get pv -o json` -> one entry per claim, in
    name order: claim, phase, volume, storage class, capacity and where the data lives."""
    by_name = {(p.get("metadata") or {}).get("name"): p for p in (pvs or {}).get("items") or []}
    out = []
    for c in (pvcs or {}).get("items") or []:
        meta, spec, status = c.get("metadata") or {}, c.get("spec") or {}, c.get("status") or {}
        volume = str(spec.get("volumeName") or "")
        pv = by_name.get(volume)
        out.append(
            {
                "claim": f"{meta.get('namespace', '')}/{meta.get('name', '')}",
                "phase": str(status.get("phase") or "Pending"),
                "volume": volume,
                "storage_class": str(spec.get("storageClassName") or ""),
                "capacity": str((status.get("capacity") or {}).get("storage") or ""),
                "source": _source(pv) if pv else "not bound to a volume: no data yet",
            }
        )
    return sorted(out, key=lambda v: v["claim"])


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"cluster_backup_volumes": volumes}
