"""`appliance completion bash|zsh|nodes`: shell completion made from the argument parser itself.

The script holds tables walked out of `build_parser()` (commands, options, which options take a
value and what kind, the positionals in order), so it says what the installed `appliance` accepts
and cannot drift from it: install-toolkit.sh writes it again with every install. Node names are
the one thing read at TAB time: `appliance completion nodes --site DIR` prints them from that
site's appliance.yml."""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from appliance_cli import __version__
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core.siteconfig import load_site

# What a value is, by the argument's metavar or dest; anything else completes to nothing.
_DIRS = {"DIR"}
_FILES = {"FILE", "PUB", "JSON", "PREFIX"}


@dataclass
class Command:
    """One command path's grammar, as the completion script needs it."""

    subs: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)  # option -> kind of its value
    positionals: list[str] = field(default_factory=list)  # kind, with '?' optional, '*' repeated


def value_kind(action: argparse.Action, path: tuple[str, ...]) -> str:
    """What completes an argument's value: choice:<words>, node, nodelist, site, dir, file, none."""
    if action.choices:
        return "choice:" + " ".join(str(c) for c in action.choices)
    if action.dest == "node":
        return "labnode" if path[:1] == ("lab",) else "node"
    if action.dest == "limit":
        return "nodelist"
    if action.dest in ("site", "site_positional"):
        return "site"
    metavar = str(action.metavar or "")
    if metavar in _DIRS or action.dest in ("dir", "into", "cache", "charts"):
        return "dir"
    if metavar in _FILES or action.type is Path or metavar.endswith((".json", ".tar")):
        return "file"
    return "none"


def grammar(parser: argparse.ArgumentParser) -> dict[tuple[str, ...], Command]:
    """Every command path of the parser (the root is ()), with its grammar."""
    out: dict[tuple[str, ...], Command] = {}

    def walk(p: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        cmd = out.setdefault(path, Command())
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    cmd.subs.append(name)
                    walk(sub, (*path, name))
            elif action.option_strings:
                cmd.options.extend(action.option_strings)
                if action.nargs != 0:
                    for opt in action.option_strings:
                        cmd.values[opt] = value_kind(action, path)
            elif action.help != argparse.SUPPRESS:
                mark = {"?": "?", "*": "*", "+": "*", argparse.REMAINDER: "*"}.get(str(action.nargs), "")
                cmd.positionals.append(value_kind(action, path) + mark)

    walk(parser, ())
    return out


def _key(path: tuple[str, ...], *more: str) -> str:
    """A table key, `appliance/node/drain` or `appliance/install/--limit`: bare words, as zsh keeps
    quotes in a subscript."""
    key = "/".join(("appliance", *path, *more))
    if not re.fullmatch(r"[A-Za-z0-9/_.-]+", key):
        raise ValueError(f"completion: '{key}' cannot be a table key")
    return key


def _tables(spec: dict[tuple[str, ...], Command]) -> list[str]:
    lines = ["  declare -gA _appliance_subs=() _appliance_opts=() _appliance_values=() _appliance_pos=()"]
    for path, cmd in spec.items():
        if cmd.subs:
            lines.append(f"  _appliance_subs[{_key(path)}]={shlex.quote(' '.join(cmd.subs))}")
        lines.append(f"  _appliance_opts[{_key(path)}]={shlex.quote(' '.join(cmd.options))}")
        for opt, kind in cmd.values.items():
            lines.append(f"  _appliance_values[{_key(path, opt)}]={shlex.quote(kind)}")
        if cmd.positionals:
            lines.append(
                f"  _appliance_pos[{_key(path)}]={shlex.quote(' '.join(k.replace(' ', ',') for k in cmd.positionals))}"
            )
    return lines


# The walker: the words before the cursor name a command path, the options given and the
# positionals; the word under the cursor is an option, an option's value, a command or a positional.
# (`cmdpath`, as zsh's `path` is its PATH.) `--opt=value` arrives split at '=' where COMP_WORDBREAKS holds it (bash's default): joined again.
_BASH_BODY = r"""
_appliance_node_names() {  # SITE PREFIX: the site's node names (comma lists: after the last comma)
  local have= part=$2 n
  if [[ $part == *,* ]]; then have=${part%,*},; part=${part##*,}; fi
  local -a args=(completion nodes)
  [[ -n $1 ]] && args+=(--site "$1")
  while IFS= read -r n; do
    [[ -n $n && $n == "$part"* && ,$have != *",$n,"* ]] && COMPREPLY+=("$have$n")
  done < <("$_appliance_cmd" "${args[@]}" 2>/dev/null)
}

_appliance_value() {  # KIND CUR SITE: COMPREPLY for one value
  local kind=$1 cur=$2 w
  case $kind in
    choice:*) kind=${kind#choice:}; for w in ${kind//,/ }; do [[ $w == "$cur"* ]] && COMPREPLY+=("$w"); done ;;
    node | nodelist) _appliance_node_names "$3" "$cur" ;;
    labnode) _appliance_node_names lab "$cur" ;;
    site) compopt -o filenames 2>/dev/null
      while IFS= read -r w; do COMPREPLY+=("$w"); done < <(compgen -d -- "$cur"; compgen -f -X '!*.y*ml' -- "$cur") ;;
    dir) compopt -o filenames 2>/dev/null
      while IFS= read -r w; do COMPREPLY+=("$w"); done < <(compgen -d -- "$cur") ;;
    file) compopt -o filenames 2>/dev/null
      while IFS= read -r w; do COMPREPLY+=("$w"); done < <(compgen -f -- "$cur") ;;
  esac
}

_appliance() {
  COMPREPLY=()
  local _appliance_cmd=${COMP_WORDS[0]} cmdpath=appliance site= opt= w i joined=0
  local -a words=() given=()
  for ((i = 1; i <= COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    if ((${#words[@]})) && [[ $w == = && ${words[${#words[@]}-1]} == --* && ${words[${#words[@]}-1]} != *=* ]]; then
      words[${#words[@]}-1]+="="; joined=1; continue
    fi
    if ((joined)); then words[${#words[@]}-1]+=$w; joined=0; continue; fi
    words+=("$w")
  done
  local cur=${words[${#words[@]}-1]}
  for ((i = 0; i < ${#words[@]} - 1; i++)); do
    w=${words[i]}
    if [[ -n $opt ]]; then [[ $opt == --site ]] && site=$w; opt=; continue; fi
    case $w in
      --site=*) site=${w#--site=} ;;
      --*=*) ;;
      -*) [[ -n ${_appliance_values[$cmdpath/$w]} ]] && opt=$w ;;
      *) if [[ " ${_appliance_subs[$cmdpath]} " == *" $w "* ]]; then cmdpath+="/$w"; else given+=("$w"); fi ;;
    esac
  done
  if [[ -n $opt ]]; then
    _appliance_value "${_appliance_values[$cmdpath/$opt]}" "$cur" "$site"; return 0
  fi
  if [[ $cur == --*=* ]]; then
    local kind=${_appliance_values[$cmdpath/${cur%%=*}]}
    [[ -n $kind ]] || return 0
    _appliance_value "$kind" "${cur#*=}" "$site"
    if [[ ${COMP_WORDS[COMP_CWORD]} == --*=* ]]; then COMPREPLY=("${COMPREPLY[@]/#/${cur%%=*}=}"); fi
    return 0
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "${_appliance_opts[$cmdpath]}" -- "$cur")); return 0
  fi
  if [[ -n ${_appliance_subs[$cmdpath]} ]]; then
    COMPREPLY=($(compgen -W "${_appliance_subs[$cmdpath]}" -- "$cur")); return 0
  fi
  # positionals: the kinds from this slot to the first required one (an optional SITE before NODE)
  local -a kinds=(${_appliance_pos[$cmdpath]})
  local n=${#given[@]} k
  if [[ ${kinds[0]} == site\? ]]; then  # --site given: no SITE; else a first word that is one
    if [[ -n $site ]]; then kinds=("${kinds[@]:1}")
    elif ((n)) && [[ -d ${given[0]} || -f ${given[0]} ]]; then site=${given[0]}; fi
  fi
  for ((i = 0; i < ${#kinds[@]}; i++)); do
    k=${kinds[i]}
    if [[ $k == *\* ]]; then ((i <= n)) && _appliance_value "${k%\*}" "$cur" "$site"; break; fi
    if ((i >= n)); then _appliance_value "${k%\?}" "$cur" "$site"; [[ $k == *\? ]] || break; fi
  done
  return 0
}
"""

_ZSH_HEAD = """# zsh runs the bash completion through its bashcompinit, as with `source <(appliance completion zsh)`
autoload -U +X compinit && { (( ${+_comps} )) || compinit; }
autoload -U +X bashcompinit && bashcompinit
"""


def bash_script(spec: dict[tuple[str, ...], Command]) -> str:
    head = (
        f"# bash completion for appliance {__version__}, made by `appliance completion bash` from its\n"
        "# argument parser: made again by each install of the toolkit, so it says what this one accepts.\n"
    )
    tables = "_appliance_tables() {\n" + "\n".join(_tables(spec)) + "\n}\n_appliance_tables\n"
    return head + tables + _BASH_BODY + "complete -F _appliance appliance\n"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("completion", help="print the shell completion script for bash or zsh")
    csub = p.add_subparsers(dest="completion_command", metavar="SHELL", required=True)
    for shell in ("bash", "zsh"):
        s = csub.add_parser(shell, help=f"the {shell} completion script (source it, or install it)")
        s.set_defaults(handler=cmd_script, shell=shell)
    n = csub.add_parser("nodes", help="the site's node names, one a line (the scripts call it)")
    add_site_arg(n)
    n.set_defaults(handler=cmd_nodes)


def cmd_script(args: argparse.Namespace) -> int:
    from appliance_cli.cli.main import build_parser  # main imports this module

    script = bash_script(grammar(build_parser()))
    print((_ZSH_HEAD if args.shell == "zsh" else "") + script, end="")
    return 0


def cmd_nodes(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    for node in [*cfg.nodes, *cfg.removed_nodes]:
        print(node.name)
    return 0
