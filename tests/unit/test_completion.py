"""`appliance completion`: bash (and zsh, through its bashcompinit) complete what the argument
parser accepts, node names from the site's appliance.yml, and each value by its kind. The scripts
run in the real shells: COMP_WORDS and COMP_CWORD set as bash sets them, then the function that
`complete -F` names."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from appliance_cli.cli.completion_cmd import grammar
from appliance_cli.cli.main import build_parser, main
from tests._support.paths import EXAMPLE

NODES = ["master1", "gpu1", "gpu2"]  # the example site's, in its order


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two scripts as `appliance completion` prints them, and an `appliance` on PATH that is
    this checkout's (the scripts call it for node names)."""
    d = tmp_path_factory.mktemp("completion")
    for shell in ("bash", "zsh"):
        out = subprocess.run(
            [sys.executable, "-m", "appliance_cli", "completion", shell],
            capture_output=True,
            text=True,
            check=True,
        )
        (d / shell).write_text(out.stdout)
    (d / "bin").mkdir()
    (d / "bin" / "appliance").write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m appliance_cli "$@"\n'
    )
    (d / "bin" / "appliance").chmod(0o755)
    return d


@pytest.fixture()
def site(tmp_path: Path) -> Path:
    """The example site, with gpu2 marked removed (node remove still names it)."""
    data = yaml.safe_load(EXAMPLE.read_text())
    assert [n["name"] for n in data["nodes"]] == NODES
    data["nodes"][2]["removed"] = True
    data["scheduler"]["projects"] = [{"name": "team-a", "gpus": 4}]  # gpu1's GPUs alone
    d = tmp_path / "site"
    d.mkdir()
    (d / "appliance.yml").write_text(yaml.safe_dump(data))
    return d


def complete(scripts: Path, cases: list[list[str]], cwd: Path, shell: str = "bash") -> list[list[str]]:
    """Each case is COMP_WORDS, the cursor on its last word: what the completion offers, sorted."""
    if shell == "bash":
        lines = [f"source {shlex.quote(str(scripts / 'bash'))}"]
        run = ["bash", "--norc", "--noprofile", "-c"]
        call = "COMPREPLY=(); _appliance"
    else:  # zsh calls it through bashcompinit's compgen -F, as _bash_complete does
        lines = [f"source {shlex.quote(str(scripts / 'zsh'))}"]
        run = ["zsh", "-f", "-c"]
        call = 'COMPREPLY=($(compgen -F _appliance -- "${COMP_WORDS[-1]}"))'
    for words in cases:
        lines.append(f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}")
        lines.append(f"{call}; printf '%s\\n' \"${{COMPREPLY[@]}}\"; echo '--end--'")
    env = {"PATH": f"{scripts / 'bin'}:/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8"}
    out = subprocess.run(
        [*run, "\n".join(lines)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stderr == ""
    chunks = out.stdout.split("--end--\n")
    assert chunks[-1] == "" and len(chunks) == len(cases) + 1, out.stdout
    return [sorted(w for w in chunk.splitlines() if w) for chunk in chunks[:-1]]


def test_every_command_and_option_completes_as_the_parser_says(scripts: Path, tmp_path: Path) -> None:
    spec = grammar(build_parser())
    assert len(spec) > 40 and ("node", "drain") in spec and ("completion", "bash") in spec
    cases, want = [], []
    for path, cmd in spec.items():
        cases.append(["appliance", *path, "-"])
        want.append(sorted(o for o in cmd.options if o.startswith("-")))
        if cmd.subs:
            cases.append(["appliance", *path, ""])
            want.append(sorted(cmd.subs))
    assert complete(scripts, cases, tmp_path) == want
    # a prefix narrows them; options of one command are not another's
    got = complete(
        scripts, [["appliance", "no"], ["appliance", "node", "d"], ["appliance", "install", "--s"]], tmp_path
    )
    assert got == [["node"], ["drain"], ["--site", "--skip-diagnose", "--skip-preflight", "--skip-tags"]]


def test_node_names_come_from_the_sites_appliance_yml(scripts: Path, site: Path, tmp_path: Path) -> None:
    s = str(site)
    cases = [
        ["appliance", "node", "drain", "--site", s, ""],  # removed nodes too: node remove names them
        ["appliance", "node", "remove", s, "g"],  # the site as SITE, then NODE
        ["appliance", "node", "uncordon", "--site", s, "gpu1", ""],  # one NODE only
        ["appliance", "install", "--site", s, "--limit", "master1,g"],
        ["appliance", "install", "--site", "=", s, "--limit", "=", "master1,"],  # bash split at '='
        ["appliance", "preflight", f"--site={s}", "--limit=g"],  # '=' not a word break
        ["appliance", "install", "--site", str(tmp_path / "nowhere"), "--limit", ""],  # no site: nothing
    ]
    assert complete(scripts, cases, tmp_path) == [
        sorted(NODES),
        ["gpu1", "gpu2"],
        [],
        ["master1,gpu1", "master1,gpu2"],
        ["master1,gpu1", "master1,gpu2"],
        ["--limit=gpu1", "--limit=gpu2"],
        [],
    ]
    # no --site: the current directory's appliance.yml, as the commands read it
    assert complete(scripts, [["appliance", "node", "drain", "m"]], site) == [["master1"]]


def test_values_complete_by_their_kind(scripts: Path, tmp_path: Path) -> None:
    (tmp_path / "bundle").mkdir()
    (tmp_path / "appliance.yml").write_text("")
    (tmp_path / "report.json").write_text("{}")
    got = complete(
        scripts,
        [
            ["appliance", "acceptance", "--scenario", ""],
            ["appliance", "acceptance", "--scenario", "4."],
            ["appliance", "install", "--bundle", ""],  # DIR: directories only
            ["appliance", "diagnose", "--json", "r"],  # FILE
            ["appliance", "config", "validate", ""],  # SITE: directories and YAML files
            ["appliance", "install", "--tags", ""],  # free text: nothing offered
            ["appliance", "report", "compare", "report.json", "r"],  # the second positional
        ],
        tmp_path,
    )
    assert got == [
        ["4.10", "4.8", "4.9", "cpu-smoke", "smoke", "tr4858"],
        ["4.10", "4.8", "4.9"],
        ["bundle"],
        ["report.json"],
        ["appliance.yml", "bundle"],
        [],
        ["report.json"],
    ]


def test_zsh_runs_the_same_completion_through_bashcompinit(scripts: Path, site: Path, tmp_path: Path) -> None:
    assert shutil.which("zsh"), "zsh is missing: scripts/bootstrap.sh installs it"
    got = complete(
        scripts,
        [
            ["appliance", ""],
            ["appliance", "node", "drain", "--site", str(site), ""],
            ["appliance", "install", "--site", str(site), "--limit", "master1,"],
            ["appliance", "acceptance", "--scenario", ""],
        ],
        tmp_path,
        shell="zsh",
    )
    assert got == [
        sorted(grammar(build_parser())[()].subs),
        sorted(NODES),
        ["master1,gpu1", "master1,gpu2"],
        ["4.10", "4.8", "4.9", "cpu-smoke", "smoke", "tr4858"],
    ]


def test_the_script_registers_itself_and_nodes_refuses_a_missing_site(
    scripts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = subprocess.run(
        ["bash", "--norc", "-c", f"source {shlex.quote(str(scripts / 'bash'))}; complete -p appliance"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "complete -F _appliance appliance"
    assert main(["completion", "nodes", "--site", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'nowhere'}: site config not found\n")
    assert "Traceback" not in err
