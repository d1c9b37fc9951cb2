"""Pure rules of the registry_seed module (and the stdlib-only / Python 3.8 contract of the
roles' custom modules, which run on Ubuntu 20.04 nodes)."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from tests._support.modules import load_role_module

ROOT = Path(__file__).resolve().parents[2]
MODULE_UTILS_FILES = sorted(ROOT.glob("roles/*/module_utils/*.py")) + sorted(ROOT.glob("module_utils/*.py"))
MODULES = sorted(ROOT.glob("roles/*/library/*.py")) + MODULE_UTILS_FILES
# a role's own or the project's module_utils, importable on the node as ansible.module_utils.<name>
ROLE_MODULE_UTILS = {f"ansible.module_utils.{p.stem}" for p in MODULE_UTILS_FILES}


seed = load_role_module("registry", "registry_seed")
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
D3 = "sha256:" + "3" * 64
DM = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("reference", "repo", "tag"),
    [
        ("registry.k8s.io/pause:3.6", "pause", "3.6"),
        ("registry.k8s.io/coredns/coredns:v1.8.6", "coredns/coredns", "v1.8.6"),
        ("docker.io/flannel/flannel:v0.22.3", "flannel/flannel", "v0.22.3"),
        ("docker.io/library/busybox:1.36", "library/busybox", "1.36"),  # library/ kept as written
        ("busybox:1.36", "busybox", "1.36"),  # no host: nothing stripped, nothing added
        ("localhost/app:1", "app", "1"),
        ("nvcr.io:443/nvidia/gpu-operator:v24.6.2", "nvidia/gpu-operator", "v24.6.2"),
        ("quay.io/x/y:1@sha256:" + "b" * 64, "x/y", "1"),
        ("registry.k8s.io/pause@sha256:" + "b" * 64, "pause", None),
        ("rancher/mirrored-flannelcni-flannel:v0.20.2", "rancher/mirrored-flannelcni-flannel", "v0.20.2"),
    ],
)
def test_repository_name_rule(reference, repo, tag):
    assert seed.split_reference(reference) == (repo, tag)


@pytest.mark.parametrize("bad", ["registry.k8s.io/Pause:3.6", "x/../y:1", "host.io/a:b:c/d", "a:-x"])
def test_invalid_references_are_refused(bad):
    with pytest.raises(
        seed.SeedError, match=rf"image reference '{re.escape(bad)}': .* is not a valid (repository name|tag)"
    ):
        seed.split_reference(bad)


def test_link_content_has_no_trailing_newline():
    assert seed.link_content(D1) == D1.encode()
    assert not seed.link_content(D1).endswith(b"\n")
    with pytest.raises(seed.SeedError, match=r"not a sha256 digest: 'sha256:xyz'"):
        seed.link_content("sha256:xyz")


def test_links_cover_layers_and_config_and_end_with_the_tag():
    links = seed.repo_links("flannel/flannel", "v0.22.3", DM, [D1, D2, D1, D3])
    paths = [p for p, _ in links]
    assert paths[:3] == [f"repositories/flannel/flannel/_layers/sha256/{d[7:]}/link" for d in (D1, D2, D3)]
    assert paths[3] == f"repositories/flannel/flannel/_manifests/revisions/sha256/{DM[7:]}/link"
    assert paths[4] == f"repositories/flannel/flannel/_manifests/tags/v0.22.3/index/sha256/{DM[7:]}/link"
    assert paths[-1] == "repositories/flannel/flannel/_manifests/tags/v0.22.3/current/link"  # last
    assert dict(links)[paths[-1]] == DM.encode()
    # digest-only references: revision link, no tag
    assert [p for p, _ in seed.repo_links("pause", None, DM, [D1])][-1].endswith(
        f"revisions/sha256/{DM[7:]}/link"
    )


def test_blob_path_layout():
    assert seed.blob_data_path("/var/lib/docker-registry", D1) == (
        f"/var/lib/docker-registry/docker/registry/v2/blobs/sha256/11/{D1[7:]}/data"
    )


def _manifest(media_type="application/vnd.oci.image.manifest.v1+json", files=None):
    files = files or [{"path": f"blobs/sha256/{d[7:]}", "digest": d, "size": 3} for d in (DM, D1, D2)]
    return {
        "artifacts": [
            {"name": "deb", "kind": "apt-repo", "files": []},
            {
                "name": "pause",
                "kind": "oci-image",
                "files": files,
                "image": {
                    "reference": "registry.k8s.io/pause:3.6",
                    "manifest_digest": DM,
                    "media_type": media_type,
                    "config_digest": D1,
                    "layers": [D2],
                },
            },
        ]
    }


def test_plan_images_links_the_config_blob_too():
    (plan,) = seed.plan_images(_manifest())
    assert plan["repository"] == "pause" and plan["tag"] == "3.6"
    assert plan["layer_links"] == [D2, D1]
    assert list(plan["blobs"]) == [DM, D1, D2]


def test_plan_images_joins_chunks():
    files = [
        {"path": "m", "digest": DM, "size": 3},
        {"path": "c", "digest": D1, "size": 3},
        {
            "path": "l",
            "digest": D2,
            "size": 6,
            "chunks": [{"digest": D3, "size": 3}, {"digest": D1, "size": 3}],
        },
    ]
    (plan,) = seed.plan_images(_manifest(files=files))
    assert plan["blobs"][D2] == [(D3, 3), (D1, 3)]


def test_plan_images_refuses_an_index_and_missing_blobs():
    with pytest.raises(seed.SeedError, match="image index"):
        seed.plan_images(_manifest("application/vnd.oci.image.index.v1+json"))
    files = [{"path": "m", "digest": DM, "size": 3}]
    with pytest.raises(seed.SeedError, match=D1):
        seed.plan_images(_manifest(files=files))


def test_second_seed_changes_nothing(tmp_path: Path):
    bundle = tmp_path / "b"
    (bundle / "blobs/sha256").mkdir(parents=True)
    import hashlib

    blobs = {}
    for content in (b"config", b"layer"):
        d = "sha256:" + hashlib.sha256(content).hexdigest()
        (bundle / "blobs/sha256" / d[7:]).write_bytes(content)
        blobs[content] = d
    mbytes = json.dumps({"config": blobs[b"config"], "layers": [blobs[b"layer"]]}).encode()
    dm = "sha256:" + hashlib.sha256(mbytes).hexdigest()
    (bundle / "blobs/sha256" / dm[7:]).write_bytes(mbytes)
    files = [{"path": "x", "digest": d, "size": len(c)} for c, d in ((mbytes, dm), *blobs.items())]
    art = {
        "name": "pause",
        "kind": "oci-image",
        "files": files,
        "image": {
            "reference": "registry.k8s.io/pause:3.6",
            "manifest_digest": dm,
            "media_type": "application/vnd.oci.image.manifest.v1+json",
            "config_digest": blobs[b"config"],
            "layers": [blobs[b"layer"]],
        },
    }
    (bundle / "manifest.json").write_text(json.dumps({"schema": "appliance-bundle", "artifacts": [art]}))
    first = seed.seed(str(bundle), str(tmp_path / "s"))
    assert first["changed"] and first["blobs_linked"] == 3
    link = tmp_path / "s/docker/registry/v2/repositories/pause/_manifests/tags/3.6/current/link"
    assert link.read_bytes() == dm.encode()
    second = seed.seed(str(bundle), str(tmp_path / "s"))
    assert second["changed"] is False
    # a tag pointing elsewhere is corrected (and reported)
    link.write_bytes(b"sha256:" + b"0" * 64)
    assert seed.seed(str(bundle), str(tmp_path / "s"))["changed"] is True
    assert link.read_bytes() == dm.encode()


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_custom_modules_are_stdlib_only_and_python38(path: Path):
    src = path.read_text()
    tree = ast.parse(src, feature_version=(3, 8))
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        for n in names:
            top = n.split(".")[0]
            allowed = n == "ansible.module_utils.basic" or n in ROLE_MODULE_UTILS
            assert top in sys.stdlib_module_names or allowed, (path.name, n)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            assert node.func.attr not in ("removeprefix", "removesuffix"), (path.name, node.func.attr)
    # builtin generics / `X | None` only inside annotations (PEP 563 keeps them unevaluated on 3.8)
    assert "from __future__ import annotations" in src
    in_annotations = set()
    for node in ast.walk(tree):
        anns = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            anns = [a.annotation for a in [*node.args.args, *node.args.kwonlyargs] if a.annotation]
            anns += [node.returns] if node.returns else []
        elif isinstance(node, ast.AnnAssign):
            anns = [node.annotation]
        for a in anns:
            in_annotations.update(id(n) for n in ast.walk(a))
    for node in ast.walk(tree):
        if id(node) in in_annotations:
            continue
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            assert node.value.id not in ("list", "dict", "tuple", "set", "type"), (path.name, node.lineno)
