"""Commands are argv lists end to end: whatever a value holds (`;`, `$()`, backticks, `|`, quotes,
newlines, spaces), it reaches the node as one argument and runs nothing.

What ssh hands the node is one string, which the node's login shell runs (`$SHELL -c STRING`, as
sshd does). Here a real `sh -c` runs that string with PATH holding only shims: each command the
string names (sudo, kubectl, journalctl, cat, touch...) writes the argv it received to a log and
does nothing else; `touch` also makes its files, as no builder touches. So the test sees exactly
what would have run on the node, and a value that broke out of its word shows up as a command of
its own (or a file that a `touch` made)."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from subprocess import run as real_run  # the tests below replace subprocess.run in the product

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance_cli.core import cluster, remote, supportbundle
from appliance_cli.core.acceptance.kube import KubectlCluster
from appliance_cli.core.siteconfig import load_site

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "appliance.yml"

HOSTILE = [
    ";", "a;touch${IFS}pwned;echo", "$(touch pwned)", "`touch pwned`", "|", "a|touch pwned", "'", "it's",
    '"', "\\", "\n", "a\ntouch pwned", " ", "two words", "/media/user/MY STICK/bundle", "&&", "||", "#",
    "*", "~", "-n", "--", "$HOME", "${IFS}", ">out", "<in", "!", "\t", "",
]  # fmt: skip
# The commands the builders name; each is a shim here. `sh` is the real one (the builders' own
# `sh -c SCRIPT sh ARG` needs it).
SHIMS = ("sudo", "kubectl", "journalctl", "cat", "df", "find", "helm", "flock", "touch", "ls", "test",
         "python3", "env", "uname", "containerd", "kubelet", "kubeadm", "crictl", "runc")  # fmt: skip


@pytest.fixture(scope="module")
def node_shell(tmp_path_factory):
    """run(remote_string, stdin) -> [argv, ...] each shim received, in order."""
    root = tmp_path_factory.mktemp("node")
    bin_dir, log = root / "bin", root / "argv.log"
    bin_dir.mkdir()
    shim = (
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + '\\n')\n"
        "if os.path.basename(sys.argv[0]) == 'sudo':\n"  # sudo -n -- CMD...: runs CMD (a shim too)
        "    assert sys.argv[1:3] == ['-n', '--'], sys.argv\n"
        "    os.execvp(sys.argv[3], sys.argv[3:])\n"
        "if os.path.basename(sys.argv[0]) == 'touch':\n"  # no builder touches: one that ran broke out
        "    [open(a, 'a').close() for a in sys.argv[1:]]\n"
    )
    for name in SHIMS:
        p = bin_dir / name
        p.write_text(shim)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    (bin_dir / "sh").symlink_to(shutil.which("sh") or "/bin/sh")

    def run(remote_string: str, stdin: str = "") -> list[list[str]]:
        log.write_text("")
        r = real_run(["sh", "-c", remote_string], input=stdin, capture_output=True, text=True,
                           env={"PATH": str(bin_dir), "HOME": str(root)}, cwd=root, check=False)  # fmt: skip
        assert r.returncode == 0, (remote_string, r.stderr)
        assert not (root / "pwned").exists()  # the touch shim makes it: a value broke out
        return [json.loads(line) for line in log.read_text().splitlines()]

    return run


@pytest.fixture(scope="module")
def cfg():
    return load_site(EXAMPLE)  # nothing connects: the remote string is only built


@pytest.mark.parametrize("user", ["root", "ubuntu"])
def test_every_hostile_word_arrives_as_one_argument(node_shell, user):
    ran = node_shell(remote.remote_command(["kubectl", *HOSTILE], user))
    via_sudo = [["sudo", "-n", "--", "kubectl", *HOSTILE]] if user != "root" else []
    assert ran == [*via_sudo, ["kubectl", *HOSTILE]]


words = st.lists(st.text(st.characters(exclude_characters="\0", exclude_categories=("Cs",))), max_size=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=words)
def test_generated_words_arrive_unchanged(node_shell, args):
    assert node_shell(remote.remote_command(["kubectl", *args], "root")) == [["kubectl", *args]]


def test_sudo_covers_the_whole_command(cfg, node_shell):
    """`sudo -n` took the first word only before: `sudo -n cat a; cat b` ran the second as the user."""
    argv = remote.ssh_argv(cfg, cfg.master, ["sh", "-c", 'cat -- "$1" || true', "sh", "a b; touch pwned"])
    assert cfg.ssh.user != "root" and argv[-2] == f"{cfg.ssh.user}@{cfg.master.address}"
    ran = node_shell(argv[-1])
    assert ran[0][:3] == ["sudo", "-n", "--"] and ran[-1] == ["cat", "--", "a b; touch pwned"]


def test_read_if_there_prints_the_file_or_nothing_and_never_runs_its_path(tmp_path, cfg, node_shell):
    """The state files' reader (upgrade, restore): an absent file is an empty answer, not a failure;
    a path with shell characters is one argument on the node, and reading it runs nothing."""
    hostile = str(tmp_path / "a b; touch pwned")
    ran = node_shell(remote.ssh_argv(cfg, cfg.master, remote.read_if_there(hostile))[-1])
    assert ran[-1] == ["cat", "--", hostile]
    absent = subprocess.run(remote.read_if_there(hostile), capture_output=True, text=True, check=False)
    assert (absent.returncode, absent.stdout) == (0, "")
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()
    Path(hostile).write_text('{"schema": 1}\n')
    there = subprocess.run(remote.read_if_there(hostile), capture_output=True, text=True, check=False)
    assert (there.returncode, there.stdout) == (0, '{"schema": 1}\n')


def test_a_string_command_is_refused_before_anything_runs(cfg, monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("ran"))
    for bad in ("cat /etc/hosts", [], ["kubectl", 3], ["a\0b"]):
        with pytest.raises((TypeError, ValueError)):
            remote.run_on(cfg, cfg.master, bad)  # type: ignore[arg-type]


@pytest.fixture
def sent(monkeypatch):
    """What run_on would hand ssh: [(remote string, stdin)]; ssh itself never runs."""
    calls: list[tuple[str, str]] = []

    def fake_run(argv, **kw):
        calls.append((argv[-1], kw.get("input") or ""))
        return subprocess.CompletedProcess(argv, 0, '{"items": []}', "")

    monkeypatch.setattr(remote.subprocess, "run", fake_run)
    return calls


@pytest.mark.parametrize("value", HOSTILE)
def test_kubectl_builders_keep_each_value_one_word(cfg, node_shell, sent, value):
    k = KubectlCluster(cfg)
    cluster.kubectl(cfg, ["get", "node", value])
    k.delete_jobs(value, [value, "b"])
    k.pods(value)
    k.logs(value, value)
    k.cleanup([value], value)
    kubectl = ["kubectl", "--kubeconfig", cluster.ADMIN_CONF]
    expected = [
        [*kubectl, "get", "node", value],
        [*kubectl, "delete", "jobs", "-n", value, value, "b", "--ignore-not-found", "--wait=false"],
        [*kubectl, "get", "pods", "-A", "-l", f"acceptance.appliance/run={value}", "-o", "json"],
        [*kubectl, "logs", "-n", value, f"job/{value}", "--tail=200"],
        [*kubectl, "delete", "jobs", "-n", value, "-l", f"acceptance.appliance/run={value}", "--ignore-not-found",
         "--wait=false"],
    ]  # fmt: skip
    got = [node_shell(text)[-1] for text, _ in sent]
    if not value:
        expected[2] = [*kubectl, "get", "pods", "-A", "-o", "json"]  # no run id: no selector
    assert got == expected


def test_a_manifest_travels_on_stdin_not_in_the_shells_text(cfg, sent):
    manifest = {"kind": "Job", "metadata": {"annotations": {"x": "'; touch pwned; echo '\n$(touch pwned)"}}}
    KubectlCluster(cfg).apply(manifest)
    text, stdin = sent[0]
    assert json.loads(stdin) == manifest and "pwned" not in text


def test_the_support_bundles_since_is_one_word(cfg, node_shell):
    since = "-2h' ; touch pwned ; echo '"
    commands = supportbundle._node_commands(cfg, cfg.master, since)
    ran = node_shell(remote.remote_command(commands["journal.txt"], "root"))
    assert ran[-1][0] == "journalctl" and f"--since={since}" in ran[-1]
    for name, argv in commands.items():  # every one runs as one command (plus its own sh), nothing else
        names = {r[0] for r in node_shell(remote.remote_command(argv, "ubuntu"))}
        assert "touch" not in names, name


def test_probe_and_diagnose_arguments_are_one_word_each(cfg, node_shell, monkeypatch):
    """probe.sh gets its arguments after `sh -s --`; diagnose's scripts after `python3 -` (the NFS
    path among them: `nfs.path` with a space and a `;` was run by the node's shell before)."""
    from appliance_cli.core.checks import diagnose, probe

    path = "/srv/nfs/my share;touch${IFS}pwned;echo"
    seen: list[list[str]] = []
    monkeypatch.setattr(probe.subprocess, "run", lambda argv, **kw: seen.append(argv) or
                        subprocess.CompletedProcess(argv, 0, "", ""))  # fmt: skip
    probe.ssh_transport(cfg)(cfg.master, ["--nfs", path], "exit 0")
    # the real sh reads its script on stdin: one that hands its arguments to a shim
    assert node_shell(seen[0][-1], stdin='kubectl "$@"\n')[-1] == ["kubectl", "--nfs", path]
    argv = diagnose.ssh_transport(cfg).argv(cfg.master, ["python3", "-", "10.0.0.1", path, "m1", "8", "1"])
    assert node_shell(argv[-1])[-1] == ["python3", "-", "10.0.0.1", path, "m1", "8", "1"]


def test_no_remote_command_in_the_product_is_built_by_joining_words():
    """The product's sources: no `" ".join(` feeding a command, no `sudo -n {` string prefix."""
    root = Path(__file__).resolve().parents[2] / "appliance_cli"
    offenders = []
    for p in root.rglob("*.py"):
        text = p.read_text()
        for needle in ('f"sudo -n {', "f'sudo -n {", 'run_on(cfg, cfg.master, f"', 'run_on(cfg, node, f"',
                       'run_on(cfg, node, "', 'run_on(cfg, cfg.master, "'):  # fmt: skip
            if needle in text:
                offenders.append(f"{p.relative_to(root.parent)}: {needle}")
    assert not offenders, offenders
