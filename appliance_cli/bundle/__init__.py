"""The offline bundle: format, build, sign, verify, inspect, import of vendor tars.

Public API (pure Python, no printing; progress goes through a callback):
  build_bundle(BuildOptions) -> BuildResult
  verify_bundle(path, key=None, jobs=None) -> VerifyReport   (raises BundleError on failure)
  require_trusted(path, key=None, jobs=None) -> VerifyReport (also fails unless signed by `key`)
  keygen(prefix), sign_bundle(path, key_path), inspect_bundle(path), import_runai(tar, into)
  load_manifest(path) -> (Manifest, raw bytes)
"""

from appliance_cli.bundle.build import BuildOptions, BuildResult, build_bundle
from appliance_cli.bundle.inspect import Inspection, inspect_bundle
from appliance_cli.bundle.model import Artifact, FileEntry, Manifest, load_manifest
from appliance_cli.bundle.progress import ProgressEvent, ProgressFn
from appliance_cli.bundle.runai import import_runai
from appliance_cli.bundle.signing import keygen, sign_bundle
from appliance_cli.bundle.verify import (
    KEY_ENV,
    BundleVerifyError,
    VerifyReport,
    require_trusted,
    verify_bundle,
)

__all__ = [
    "KEY_ENV",
    "Artifact",
    "BuildOptions",
    "BuildResult",
    "BundleVerifyError",
    "FileEntry",
    "Inspection",
    "Manifest",
    "ProgressEvent",
    "ProgressFn",
    "VerifyReport",
    "build_bundle",
    "import_runai",
    "inspect_bundle",
    "keygen",
    "load_manifest",
    "require_trusted",
    "sign_bundle",
    "verify_bundle",
]
