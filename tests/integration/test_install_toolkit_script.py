"""install-toolkit.sh for real, on this machine, against a tiny bundle (stand-in toolkit wheel +
one dependency + a pip wheel; see tests/_support/toolkit_bundle.py) signed with the project's own
signing code: it checks manifest.sig over manifest.json with this machine's openssl against the
operator's key (--key, $APPLIANCE_BUNDLE_PUBKEY, or the .pub on the stick confirmed by its key id)
before anything else, installs offline (in a network namespace with no interfaces up where
`unshare` is available), is idempotent, uses the bundle's controller runtime, and stops with one
clear line for each failure."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from appliance_cli.bundle import keygen, load_manifest, sign_bundle, signing
from appliance_cli.bundle.model import INSTALL_SCRIPT
from tests._support.toolkit_bundle import TOOLKIT_VERSION, build_toolkit_bundle, fake_runtime

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="install-toolkit.sh runs as root"),
]
TOOLS = ("sh", "sha256sum", "tar", "gzip", "mktemp", "cut", "sed", "grep", "wc", "ln", "id", "cat", "rm")
TOOLS += ("mkdir", "mv", "rmdir", "openssl", "base64", "head", "tail", "od", "tr")
UNSHARE = shutil.which("unshare")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Both bundles signed by `signer` (as `appliance bundle keygen|sign` do); `other` signs nothing."""
    tmp = tmp_path_factory.mktemp("bundles")
    plain = build_toolkit_bundle(tmp / "plain").path
    with_rt = build_toolkit_bundle(tmp / "rt", runtime=fake_runtime(tmp / "rt" / "runtime")).path
    key, pub, _ = keygen(tmp / "keys" / "signer")
    other_key, other_pub, _ = keygen(tmp / "keys" / "other")
    for b in (plain, with_rt):
        sign_bundle(b, key)
    return {"plain": plain, "runtime": with_rt, "pub": pub, "other_pub": other_pub, "other_key": other_key}


@pytest.fixture
def bundle(built, tmp_path: Path) -> Path:
    copy = tmp_path / "stick" / "bundle"
    shutil.copytree(built["plain"], copy)
    return copy


def key_id(pub: Path) -> str:
    """The key id the toolkit prints for a key (`bundle keygen`, `bundle verify`)."""
    return signing.key_id(signing.load_public_key(pub))


def trusted(built) -> tuple[str, str]:
    return ("--key", str(built["pub"]))


def python_dir(tmp: Path, python: str = sys.executable) -> Path:
    """A PATH entry whose python3 is `python` (a Python 3.11+ for these tests)."""
    d = tmp / "pybin"
    d.mkdir(exist_ok=True)
    (d / "python3").unlink(missing_ok=True)
    (d / "python3").symlink_to(python)
    return d


def run(
    bundle: Path,
    tmp: Path,
    path: str,
    *args: str,
    env: dict[str, str] | None = None,
    stdin: int | None = subprocess.DEVNULL,
) -> subprocess.CompletedProcess:
    full_env = {
        "PATH": path,
        "APPLIANCE_PREFIX": str(tmp / "opt"),
        "APPLIANCE_BIN_LINK": str(tmp / "bin" / "appliance"),
        "APPLIANCE_BASH_COMPLETION": str(tmp / "completions" / "appliance"),
        "LANG": "C",
        **(env or {}),
    }
    offline = (UNSHARE, "--net") if UNSHARE else ()
    argv = [*offline, "sh", str(bundle / INSTALL_SCRIPT), *args]
    return subprocess.run(
        argv, stdin=stdin, capture_output=True, text=True, env=full_env, timeout=300, check=False
    )


def default_path(tmp: Path) -> str:
    return f"{python_dir(tmp)}:/usr/local/bin:/usr/bin:/bin"


def test_installs_offline_and_a_rerun_changes_nothing(built, bundle: Path, tmp_path: Path) -> None:
    first = run(bundle, tmp_path, default_path(tmp_path), *trusted(built))
    assert first.returncode == 0, first.stderr
    assert f"manifest.json: signature valid (key {key_id(built['pub'])})" in first.stdout
    assert f"installed: appliance {TOOLKIT_VERSION} in {tmp_path / 'opt' / 'venv'}" in first.stdout
    assert f"controller Python: {python_dir(tmp_path) / 'python3'}" in first.stdout
    assert "next:\n  appliance init /root/site" in first.stdout
    assert "appliance install --site /root/site" in first.stdout
    link = tmp_path / "bin" / "appliance"
    assert os.readlink(link) == str(tmp_path / "opt" / "venv" / "bin" / "appliance")
    out = subprocess.run([str(link)], capture_output=True, text=True, check=True).stdout
    assert "hello from tinydep" in out  # the dependency came from the bundle too
    assert not list((tmp_path / "opt").glob(".install.*"))  # the temp dir is gone
    # the bash completion, as the installed toolkit prints it
    completion = tmp_path / "completions" / "appliance"
    assert completion.read_text() == "complete -W 'install status' appliance\n"
    assert f"bash completion: {completion} (zsh: " in first.stdout
    assert oct(completion.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in completion.parent.iterdir()] == ["appliance"]

    venv_mtime = (tmp_path / "opt" / "venv").stat().st_mtime_ns
    completion_inode = completion.stat().st_ino
    second = run(bundle, tmp_path, default_path(tmp_path), *trusted(built))
    assert second.returncode == 0, second.stderr
    assert "already installed from this bundle, nothing to do" in second.stdout
    assert (tmp_path / "opt" / "venv").stat().st_mtime_ns == venv_mtime
    assert "bash completion" not in second.stdout and completion.stat().st_ino == completion_inode
    # a completion script lost since (or from an older toolkit) is written again by the no-op
    completion.write_text("complete -W 'old' appliance\n")
    third = run(bundle, tmp_path, default_path(tmp_path), *trusted(built))
    assert third.returncode == 0 and "nothing to do" in third.stdout, third.stderr
    assert completion.read_text() == "complete -W 'install status' appliance\n"
    assert [p.name for p in completion.parent.iterdir()] == ["appliance"]


def test_uses_the_bundles_controller_runtime(built, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(built["runtime"], bundle)
    m, _ = load_manifest(bundle)
    rt = next(a for a in m.artifacts if a.role == "controller-runtime")
    # the key from the environment, as `appliance install` takes it
    r = run(
        bundle, tmp_path, "/usr/local/bin:/usr/bin:/bin", env={"APPLIANCE_BUNDLE_PUBKEY": str(built["pub"])}
    )
    assert r.returncode == 0, r.stderr
    assert f"manifest.json: signature valid (key {key_id(built['pub'])})" in r.stdout
    py = tmp_path / "opt" / "python" / "bin" / "python3"
    assert f"unpacking the controller runtime {rt.files[0].path}" in r.stdout
    assert f"controller Python: {py} " in r.stdout
    assert (tmp_path / "opt" / "python" / ".appliance-runtime").read_text().strip() == rt.digest[7:]
    again = run(bundle, tmp_path, "/usr/local/bin:/usr/bin:/bin", *trusted(built))
    assert again.returncode == 0 and "nothing to do" in again.stdout


def _one_error(r: subprocess.CompletedProcess, code: int) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    errors = [line for line in r.stderr.splitlines() if line.startswith("install-toolkit.sh: error: ")]
    assert len(errors) == 1, r.stderr
    return errors[0]


def test_not_root(bundle: Path, tmp_path: Path) -> None:
    setpriv = shutil.which("setpriv")
    if not setpriv:
        pytest.skip("setpriv (util-linux) is missing")
    os.chmod(tmp_path, 0o755)
    for d in [bundle, *bundle.parents]:
        if d == Path("/"):
            break
        os.chmod(d, os.stat(d).st_mode | 0o005)
    nobody = (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")
    r = subprocess.run(
        [*nobody, "sh", str(bundle / INSTALL_SCRIPT)], capture_output=True, text=True, check=False
    )
    assert "run it as root: sudo sh" in _one_error(r, 3)


def test_manifest_missing(built, bundle: Path, tmp_path: Path) -> None:
    (bundle / "manifest.json").unlink()
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path), *trusted(built)), 4)
    assert f"{bundle / 'manifest.json'} is missing" in err


def test_edited_script_is_refused(built, bundle: Path, tmp_path: Path) -> None:
    with open(bundle / INSTALL_SCRIPT, "a") as f:
        f.write("# edited\n")
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path), *trusted(built)), 4)
    assert "manifest.json does not record this script's sha256" in err
    assert not (tmp_path / "opt").exists()


def _wheel_blob(bundle: Path, dist: str) -> tuple[str, Path]:
    m, _ = load_manifest(bundle)
    (f,) = next(a for a in m.artifacts if a.kind == "wheel" and a.name == dist).files
    return f.path, bundle / "blobs" / "sha256" / f.digest[7:]


def test_missing_wheel_blob_is_named(built, bundle: Path, tmp_path: Path) -> None:
    name, blob = _wheel_blob(bundle, "tinydep")
    blob.unlink()
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path), *trusted(built)), 4)
    assert f"wheel {name}: blob sha256:{blob.name} is missing" in err
    assert not (tmp_path / "opt" / "venv").exists()


def test_corrupt_wheel_blob_is_named(built, bundle: Path, tmp_path: Path) -> None:
    name, blob = _wheel_blob(bundle, "appliance_toolkit")
    data = bytearray(blob.read_bytes())
    data[10] ^= 0xFF
    blob.write_bytes(bytes(data))
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path), *trusted(built)), 4)
    assert f"wheel {name}: content does not match its sha256" in err and "corrupt" in err


def test_no_fitting_python_is_named(built, bundle: Path, tmp_path: Path) -> None:
    """Only a python3 that is 3.8 (focal's) and no controller runtime in the bundle."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for t in TOOLS:
        (tools / t).symlink_to(shutil.which(t) or f"/bin/{t}")
    old = tools / "python3"
    old.write_text("#!/bin/sh\necho 3.8\n")
    old.chmod(0o755)
    err = _one_error(run(bundle, tmp_path, str(tools), *trusted(built)), 3)
    assert "no controller Python: the toolkit needs CPython 3.11 or newer" in err
    assert "carries no controller runtime" in err and f"{old}=3.8" in err


# --- the chain: manifest.sig over manifest.json, by the operator's key, before anything else ---


def _nothing_installed(tmp: Path) -> None:
    assert not (tmp / "opt").exists() and not (tmp / "bin").exists()
    assert not (tmp / "pwned").exists()


def _evil_script(bundle: Path, tmp: Path) -> None:
    """What a stick attacker does: change the script (here: a line that leaves a mark once the
    install is done), and record the new script's sha256 and size in manifest.json."""
    script = bundle / INSTALL_SCRIPT
    data = script.read_bytes() + f'touch "{tmp / "pwned"}"\n'.encode()
    script.write_bytes(data)
    manifest = json.loads((bundle / "manifest.json").read_bytes())
    manifest["install_script"]["digest"] = "sha256:" + hashlib.sha256(data).hexdigest()
    manifest["install_script"]["size"] = len(data)
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def test_edited_manifest_is_refused_even_with_the_scripts_hash_kept(
    built, bundle: Path, tmp_path: Path
) -> None:
    _evil_script(bundle, tmp_path)
    r = run(bundle, tmp_path, default_path(tmp_path), *trusted(built))
    err = _one_error(r, 4)
    assert err == (
        "install-toolkit.sh: error: manifest.json does not match manifest.sig: "
        "the manifest was changed after signing, refusing the bundle"
    )
    _nothing_installed(tmp_path)


def test_manifest_edited_alone_is_refused(built, bundle: Path, tmp_path: Path) -> None:
    raw = (bundle / "manifest.json").read_bytes()
    (bundle / "manifest.json").write_bytes(raw.replace(b'"profile": "unit"', b'"profile": "evil"'))
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path), *trusted(built)), 4)
    assert "manifest.json does not match manifest.sig" in err
    _nothing_installed(tmp_path)


def test_wrong_key_is_refused(built, bundle: Path, tmp_path: Path) -> None:
    r = run(bundle, tmp_path, default_path(tmp_path), "--key", str(built["other_pub"]))
    err = _one_error(r, 4)
    signer, other = key_id(built["pub"]), key_id(built["other_pub"])
    assert f"manifest.sig was made by key {signer}, not by the trusted key {other}" in err
    assert "wrong key" in err
    _nothing_installed(tmp_path)


def test_resigned_by_another_key_under_the_trusted_id_is_refused(built, bundle: Path, tmp_path: Path) -> None:
    """The attacker signs the edited manifest with their own key and writes the trusted key's id in."""
    _evil_script(bundle, tmp_path)
    sign_bundle(bundle, built["other_key"])
    sig = json.loads((bundle / "manifest.sig").read_bytes())
    sig["key_id"] = key_id(built["pub"])
    (bundle / "manifest.sig").write_text(json.dumps(sig, indent=1) + "\n")
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path), *trusted(built)), 4)
    assert "manifest.json does not match manifest.sig" in err
    _nothing_installed(tmp_path)


@pytest.mark.parametrize(
    ("damage", "code", "says"),
    [
        ("missing", 4, "manifest.sig is missing: manifest.json is not signed"),
        ("garbage", 4, "manifest.sig is malformed"),
        ("short", 4, "manifest.sig is malformed"),
    ],
)
def test_missing_or_malformed_signature_is_refused(
    built, bundle: Path, tmp_path: Path, damage: str, code: int, says: str
) -> None:
    sig = bundle / "manifest.sig"
    if damage == "missing":
        sig.unlink()
    elif damage == "garbage":
        sig.write_text("not json at all\n")
    else:  # a valid-looking file whose signature is 63 bytes
        data = json.loads(sig.read_bytes())
        data["signature"] = base64.b64encode(base64.b64decode(data["signature"])[:63]).decode()
        sig.write_text(json.dumps(data, indent=1) + "\n")
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path), *trusted(built)), code)
    assert says in err
    _nothing_installed(tmp_path)


def test_no_key_anywhere_is_refused(bundle: Path, tmp_path: Path) -> None:
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path)), 3)
    assert "manifest.sig: no public key to check it with: pass --key PUB" in err
    _nothing_installed(tmp_path)


def test_not_a_public_key_is_refused(built, bundle: Path, tmp_path: Path) -> None:
    r = run(bundle, tmp_path, default_path(tmp_path), "--key", str(built["other_key"]))
    assert "is not a PEM public key" in _one_error(r, 3)
    _nothing_installed(tmp_path)


# the key on the stick, beside the bundle directory: trusted only once its key id is confirmed


@pytest.fixture
def stick_key(built, bundle: Path) -> Path:
    dest = bundle.parent / "signer.pub"
    shutil.copy(built["pub"], dest)
    return dest


def test_stick_key_with_the_right_fingerprint_installs(
    built, bundle: Path, stick_key: Path, tmp_path: Path
) -> None:
    kid = key_id(built["pub"])
    r = run(bundle, tmp_path, default_path(tmp_path), "--fingerprint", kid)
    assert r.returncode == 0, r.stderr
    assert f"the public key {stick_key}: key id {kid}, as --fingerprint says" in r.stdout
    assert f"manifest.json: signature valid (key {kid})" in r.stdout
    assert f"installed: appliance {TOOLKIT_VERSION}" in r.stdout


@pytest.mark.parametrize("on_stick", ["signer", "other"])
def test_stick_key_with_a_wrong_fingerprint_is_refused(
    built, bundle: Path, tmp_path: Path, on_stick: str
) -> None:
    """The stick's key is not the one the operator names: an attacker's key, or the wrong id typed."""
    stick = bundle.parent / "signer.pub"
    shutil.copy(built["pub" if on_stick == "signer" else "other_pub"], stick)
    named = key_id(built["other_pub" if on_stick == "signer" else "pub"])
    r = run(bundle, tmp_path, default_path(tmp_path), "--fingerprint", named)
    err = _one_error(r, 4)
    assert f"manifest.sig: the key {stick} has key id {key_id(stick)}, not {named} (--fingerprint)" in err
    _nothing_installed(tmp_path)


def test_stick_key_unconfirmed_without_a_terminal_is_refused(
    built, bundle: Path, stick_key: Path, tmp_path: Path
) -> None:
    r = run(bundle, tmp_path, default_path(tmp_path))
    err = _one_error(r, 3)
    kid = key_id(built["pub"])
    assert "manifest.sig: the key on the stick is not confirmed and there is no terminal to ask" in err
    assert f"pass --fingerprint {kid}" in err
    assert f"its key id: {kid}" in r.stdout  # shown, so it can be compared
    _nothing_installed(tmp_path)


@pytest.mark.parametrize("answer", ["yes", "no"])
def test_stick_key_confirmed_at_the_terminal(
    built, bundle: Path, stick_key: Path, tmp_path: Path, answer: str
) -> None:
    master, slave = os.openpty()
    try:
        os.write(master, f"{answer}\n".encode())
        r = run(bundle, tmp_path, default_path(tmp_path), stdin=slave)
    finally:
        os.close(slave)
        os.close(master)
    kid = key_id(built["pub"])
    assert f"its key id: {kid}" in r.stdout
    assert "is this the key id of the bundle's signer" in r.stdout
    if answer == "yes":
        assert r.returncode == 0, r.stderr
        assert f"manifest.json: signature valid (key {kid})" in r.stdout
        assert f"installed: appliance {TOOLKIT_VERSION}" in r.stdout
    else:
        assert "manifest.sig: the key on the stick was not confirmed" in _one_error(r, 3)
        _nothing_installed(tmp_path)


def test_an_attackers_resigned_stick_with_its_own_key_is_refused(built, bundle: Path, tmp_path: Path) -> None:
    """The attacker edits, re-signs with their key and puts their .pub on the stick: the operator's
    --key wins over it (no prompt, no fingerprint), and names the stranger's key."""
    _evil_script(bundle, tmp_path)
    sign_bundle(bundle, built["other_key"])
    shutil.copy(built["other_pub"], bundle.parent / "signer.pub")
    err = _one_error(run(bundle, tmp_path, default_path(tmp_path), *trusted(built)), 4)
    assert f"manifest.sig was made by key {key_id(built['other_pub'])}, not by the trusted key" in err
    _nothing_installed(tmp_path)


def focal_openssl(tmp: Path) -> Path:
    """A PATH entry whose openssl acts as Ubuntu 20.04's 1.1.1f: keys yes, `pkeyutl -rawin` no."""
    d = tmp / "focal-openssl"
    d.mkdir()
    shim = d / "openssl"
    shim.write_text(
        "#!/bin/sh\n"
        'case $1 in\npkeyutl) echo "pkeyutl: Unrecognized flag rawin" >&2; exit 1 ;;\n'
        'version) echo "OpenSSL 1.1.1f  31 Mar 2020"; exit 0 ;;\nesac\n'
        f'exec {shutil.which("openssl")} "$@"\n'
    )
    shim.chmod(0o755)
    return d


def test_an_openssl_that_cannot_verify_ed25519_falls_back_to_python3(
    built, bundle: Path, tmp_path: Path
) -> None:
    """Ubuntu 20.04: openssl 1.1.1f cannot, the system's python3 checks manifest.sig (RFC 8032)."""
    path = f"{focal_openssl(tmp_path)}:{default_path(tmp_path)}"
    py = python_dir(tmp_path) / "python3"
    _evil_script(bundle, tmp_path)
    err = _one_error(run(bundle, tmp_path, path, *trusted(built)), 4)
    assert "manifest.json does not match manifest.sig: the manifest was changed after signing" in err
    _nothing_installed(tmp_path)

    shutil.rmtree(bundle)
    shutil.copytree(built["plain"], bundle)
    r = run(bundle, tmp_path, path, *trusted(built))
    assert r.returncode == 0, r.stderr
    assert (
        "this machine's openssl (OpenSSL 1.1.1f  31 Mar 2020) cannot verify Ed25519 signatures "
        f"(OpenSSL 3.0 or newer can): checking manifest.sig with {py}"
    ) in r.stdout
    assert f"manifest.json: signature valid (key {key_id(built['pub'])})" in r.stdout
    assert f"installed: appliance {TOOLKIT_VERSION}" in r.stdout


def test_no_way_to_verify_ed25519_is_named(built, bundle: Path, tmp_path: Path) -> None:
    """openssl 1.1.1 and no python3 at all: refused, before anything is installed."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for t in TOOLS:
        if t != "openssl":
            (tools / t).symlink_to(shutil.which(t) or f"/bin/{t}")
    path = f"{focal_openssl(tmp_path)}:{tools}"
    err = _one_error(run(bundle, tmp_path, path, *trusted(built)), 3)
    assert err == (
        "install-toolkit.sh: error: manifest.sig cannot be checked: this machine's openssl "
        "(OpenSSL 1.1.1f  31 Mar 2020) cannot verify Ed25519 signatures (OpenSSL 3.0 or newer can), "
        "and there is no python3 to check it with"
    )
    _nothing_installed(tmp_path)


def test_run_from_inside_the_bundle_imports_nothing_from_it(built, bundle: Path, tmp_path: Path) -> None:
    """`cd /media/appliance-usb/bundle && sudo sh install-toolkit.sh`: a logging.py added beside the
    signed files is not what `python -m venv` imports (it was, as root: '' is first on sys.path).
    The script's path and --key, both relative here, still resolve."""
    shutil.copy(built["pub"], tmp_path / "signing.pub")
    (bundle / "logging.py").write_text(f"open({str(tmp_path / 'pwned')!r}, 'w').close()\n")
    env = {
        "PATH": default_path(tmp_path),
        "APPLIANCE_PREFIX": str(tmp_path / "opt"),
        "APPLIANCE_BIN_LINK": str(tmp_path / "bin" / "appliance"),
        "APPLIANCE_BASH_COMPLETION": str(tmp_path / "completions" / "appliance"),
        "LANG": "C",
    }
    offline = (UNSHARE, "--net") if UNSHARE else ()
    r = subprocess.run(
        [*offline, "sh", INSTALL_SCRIPT, "--key", "../../signing.pub"],
        cwd=bundle,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert not (tmp_path / "pwned").exists(), r.stderr
    assert r.returncode == 0, r.stderr
    assert f"manifest.json: signature valid (key {key_id(built['pub'])})" in r.stdout
    assert f"installed: appliance {TOOLKIT_VERSION}" in r.stdout
