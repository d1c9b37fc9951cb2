"""A SYNTHETIC Run:ai air-gapped vendor tar — TEST ONLY, never a real Run:ai release.

The real `runai-<version>.tar.gz` comes from Run:ai support and cannot be obtained here. This
module writes one shaped like it (the appliance guide, section 2: extract, `cd deploy`, run
`prepare_installation.sh` to push the images, `runai-adm generate-values`, then `helm install
runai-backend runai-backend-<version>.tgz`), so `appliance bundle import-runai` and the
`scheduler_stack` role's runai path run against the same layout:

    deploy/prepare_installation.sh          (prints that the appliance does not run it: K3)
    deploy/images/runai-images.tar          (an OCI archive of small busybox-built images)
    deploy/runai-backend-<version>.tgz      (a real helm chart archive: Chart.yaml, values.yaml,
                                             templates/; no values.schema.json: the lab's helm
                                             stand-in needs python3-jsonschema on the master
                                             to enforce one, which the lab does not install)
    deploy/runai-cluster-<version>.tgz      (the cluster chart, same)
    deploy/bin/runai-adm                    (administrator CLI: `runai-adm version`)
    deploy/bin/runai                        (researcher CLI: `runai version`)

`import-runai` strips the one top folder (`deploy/`), so in the bundle the `runai-<version>` file
artifact holds `bin/runai-adm`, `bin/runai` and `prepare_installation.sh`; the images become
oci-image artifacts and the two charts helm-chart artifacts `runai-backend` and `runai-cluster`.

The charts' values keys follow what `runai-adm generate-values` writes as far as the guide and
public docs show (global.domain, the TLS secret, the ingress controller's external IPs, the NFS
server/path, the air-gapped flag); the images are this module's busybox images under Run:ai's
registry path (gcr.io/run-ai-prod/...), which the lab registry serves once the bundle is seeded.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
from pathlib import Path

import yaml

from appliance_cli.bundle import chartpack
from appliance_cli.bundle.oci import build_local_image

REGISTRY = "gcr.io/run-ai-prod"
# Run:ai supports Kubernetes 1.19 to 1.24 (the guide, section 2).
KUBE_VERSION = ">=1.19.0-0 <1.25.0-0"

# component key in the chart's values -> image name under REGISTRY
BACKEND_IMAGES = {
    "backend": "backend",
    "frontend": "frontend",
    "identityManager": "identity-manager",
    "db": "postgres",
    "nginx-ingress": "nginx-ingress-controller",
}
CLUSTER_IMAGES = {"operator": "operator", "scheduler": "scheduler", "agent": "agent"}


def image_refs(version: str) -> list[str]:
    names = list(BACKEND_IMAGES.values()) + list(CLUSTER_IMAGES.values())
    return [f"{REGISTRY}/{n}:{version}" for n in names]


def _component(name: str, version: str) -> dict:
    return {"image": {"repository": f"{REGISTRY}/{name}", "tag": version}}


def backend_values(version: str) -> dict:
    values: dict = {
        "global": {
            "domain": "",
            "airgapped": False,
            "image": {"registry": REGISTRY},
            "ingress": {"tlsSecretName": "runai-backend-tls"},
            "nodeSelector": {},
            "tolerations": [],
            "customCA": {"enabled": False, "secretName": "runai-ca-cert"},
        },
        "nfs-client-provisioner": {"enabled": True, "nfs": {"server": "", "path": ""}},
    }
    for key, name in BACKEND_IMAGES.items():
        values[key] = _component(name, version)
    values["nginx-ingress"]["controller"] = {"service": {"externalIPs": []}}
    return values


def cluster_values(version: str) -> dict:
    values: dict = {
        "controlPlane": {"url": "", "clientSecret": ""},
        "cluster": {"uid": "", "url": ""},
        "global": {"nodeSelector": {}, "tolerations": [], "customCA": {"enabled": False}},
    }
    for key, name in CLUSTER_IMAGES.items():
        values[key] = _component(name, version)
    return values


TEMPLATE = """\
# Synthetic Run:ai chart (test only): the lab's helm stand-in renders no templates.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-%(component)s
spec:
  template:
    spec:
      nodeSelector: {{ toYaml .Values.global.nodeSelector | nindent 8 }}
      tolerations: {{ toYaml .Values.global.tolerations | nindent 8 }}
      containers:
        - name: %(component)s
          image: "{{ .Values.%(key)s.image.repository }}:{{ .Values.%(key)s.image.tag }}"
"""


def _write_chart(root: Path, name: str, version: str, values: dict, components: dict) -> Path:
    d = root / name
    (d / "templates").mkdir(parents=True, exist_ok=True)
    chart = {
        "apiVersion": "v2",
        "name": name,
        "description": f"SYNTHETIC {name} chart for the appliance's tests (not Run:ai's)",
        "version": version,
        "appVersion": version,
        "kubeVersion": KUBE_VERSION,
    }
    (d / "Chart.yaml").write_text(yaml.safe_dump(chart, sort_keys=False))
    (d / "values.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
    for key, comp in components.items():
        text = TEMPLATE % {"component": comp, "key": key if "-" not in key else f'["{key}"]'}
        (d / "templates" / f"{comp}.yaml").write_text(text)
    return d


def _oci_archive(refs: list[str], busybox: str) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        index: dict = {"schemaVersion": 2, "manifests": []}
        written: set[str] = set()
        for ref in refs:
            blobs = build_local_image(ref, busybox)
            manifest = blobs.pop("manifest")
            digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
            blobs[digest] = manifest
            for d, b in blobs.items():
                if d not in written:
                    _add(t, f"blobs/sha256/{d[7:]}", b)
                    written.add(d)
            index["manifests"].append(
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": digest,
                    "size": len(manifest),
                    "annotations": {"io.containerd.image.name": ref},
                }
            )
        _add(t, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(t, "index.json", json.dumps(index).encode())
    return raw.getvalue()


def _add(t: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = len(data), mode, 0
    t.addfile(ti, io.BytesIO(data))


def _cli(name: str, version: str) -> bytes:
    return (
        "#!/bin/sh\n"
        f"# SYNTHETIC {name} (appliance tests only): prints its version, does nothing else\n"
        'case "$1" in\n'
        f'  version|--version) echo "{name} version {version} (synthetic test build)";;\n'
        f"  *) echo \"{name} {version}: synthetic test build, only 'version' is implemented\" >&2; exit 2;;\n"
        "esac\n"
    ).encode()


PREPARE = b"""#!/bin/sh
# SYNTHETIC prepare_installation.sh (appliance tests only). The vendor script pushes the images to
# $REGISTRY_URL; the appliance never runs it: `appliance bundle import-runai` turns the images
# into bundle artifacts and the registry role seeds them (SEED-COVERAGE K3).
echo "prepare_installation.sh: synthetic; the appliance seeds the registry from the bundle" >&2
exit 1
"""


def make_vendor_tar(out_dir: Path, version: str, busybox: str) -> Path:
    """Write `runai-<version>.tar.gz` into out_dir and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        return _make(out_dir, Path(tmp), version, busybox)


def _make(out_dir: Path, work: Path, version: str, busybox: str) -> Path:
    backend = _write_chart(
        work, "runai-backend", version, backend_values(version), BACKEND_IMAGES,
    )  # fmt: skip
    cluster = _write_chart(
        work, "runai-cluster", version, cluster_values(version), CLUSTER_IMAGES,
    )  # fmt: skip
    path = out_dir / f"runai-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        _add(t, "deploy/prepare_installation.sh", PREPARE, 0o755)
        _add(t, "deploy/images/runai-images.tar", _oci_archive(image_refs(version), busybox))
        _add(t, f"deploy/runai-backend-{version}.tgz", chartpack.pack(backend, "runai-backend"))
        _add(t, f"deploy/runai-cluster-{version}.tgz", chartpack.pack(cluster, "runai-cluster"))
        _add(t, "deploy/bin/runai-adm", _cli("runai-adm", version), 0o755)
        _add(t, "deploy/bin/runai", _cli("runai", version), 0o755)
    return path


if __name__ == "__main__":  # python -m tests._support.runai_vendor OUT_DIR VERSION
    import shutil
    import sys

    print(make_vendor_tar(Path(sys.argv[1]), sys.argv[2], shutil.which("busybox") or "/bin/busybox"))
