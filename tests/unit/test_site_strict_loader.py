"""appliance.yml is read strictly (issue 28, "a strict loader"): a duplicate key, an alias, a
non-UTF-8 byte, a Jinja marker in a site value or a role_vars name that switches a control off is
one line naming where, exit 2; a site that runs without signature checking says so loudly. And the
rendered group_vars carry every site string as one YAML scalar, whatever it holds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance_cli.cli.main import main
from appliance_cli.core import inventory, siteconfig, siteyaml
from appliance_cli.core.siteconfig import PROTECTED_ROLE_VARS, known_role_vars, load_site
from appliance_cli.core.siteyaml import ALIAS_CAP
from appliance_cli.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "example" / "appliance.yml"


def _site(tmp_path: Path, text: str | bytes) -> Path:
    f = tmp_path / "appliance.yml"
    if isinstance(text, bytes):
        f.write_bytes(text)
    else:
        f.write_text(text)
    return f


def _validate(f: Path, capsys) -> tuple[int, list[str], str]:
    rc = main(["config", "validate", "--site", str(f)])
    cap = capsys.readouterr()
    errors = [line for line in cap.err.splitlines() if line.startswith("error")]
    return rc, errors, cap.out + cap.err


def test_a_duplicate_require_signature_is_refused_naming_both_lines(tmp_path, capsys):
    text = EXAMPLE.read_text()
    assert text.count("  require_signature: true\n") == 1
    lines = text.replace(
        "  require_signature: true\n", "  require_signature: true\n  require_signature: false\n"
    )
    f = _site(tmp_path, lines)
    first = lines.splitlines().index("  require_signature: true") + 1
    rc, errors, _ = _validate(f, capsys)
    assert rc == 2
    assert len(errors) == 1, errors
    assert f"key 'require_signature' is given twice (lines {first} and {first + 1})" in errors[0]
    assert f"line {first + 1}:" in errors[0]


def test_duplicate_keys_anywhere_are_refused(tmp_path, capsys):
    rc, errors, _ = _validate(_site(tmp_path, EXAMPLE.read_text() + "\nsite:\n  name: other\n"), capsys)
    assert rc == 2 and "key 'site' is given twice" in errors[0]


def test_aliases_are_refused_before_they_expand(tmp_path, capsys):
    laughs = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    laughs += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    text = (
        EXAMPLE.read_text()
        + "role_vars:\n  os_prereqs_extra_packages:\n"
        + "".join(f"    {line}\n" for line in laughs)
    )
    f = _site(tmp_path, text)
    t0 = time.monotonic()
    rc, errors, _ = _validate(f, capsys)
    assert rc == 2 and len(errors) == 1
    assert f"aliases expand to more than {ALIAS_CAP} values (at *a" in errors[0]
    assert time.monotonic() - t0 < 10  # refused while parsing, not after 9**9 expansions


def test_a_few_aliases_as_pyyaml_writes_them_are_read(tmp_path):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["network"]["dns_servers"] = data["network"]["ntp_servers"] = ["10.0.0.53"]
    text = yaml.safe_dump(data)
    assert "&id001" in text and "*id001" in text
    cfg = load_site(_site(tmp_path, text))
    assert cfg.network.ntp_servers == cfg.network.dns_servers == ["10.0.0.53"]


def test_the_cap_counts_what_an_alias_stands_for():
    rows = "".join("  - *r\n" for _ in range(ALIAS_CAP // 11))
    ok = "r: &r [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nt:\n" + rows
    assert len(siteyaml.loads(ok, "x")["t"]) == ALIAS_CAP // 11
    with pytest.raises(ConfigError, match="aliases expand to more than"):
        siteyaml.loads(ok + "  - *r\n" * 20, "x")


@pytest.mark.parametrize("cycle", ["x: &a [1, 2, *a]", "x: &a {k: [*a]}", "&r {site: *r}"])
def test_an_alias_inside_the_value_it_names_is_refused(tmp_path, capsys, cycle):
    """Found by tests/unit/test_fuzz_inputs.py: SafeLoader built a list (or dict) that holds itself,
    and the Jinja-marker walk over the site's values recursed into a RecursionError, exit 70."""
    rc, errors, out = _validate(_site(tmp_path, cycle + "\n"), capsys)
    assert rc == 2 and len(errors) == 1 and "Traceback" not in out
    assert "line 1: alias *" in errors[0] and "(a cycle)" in errors[0]


def test_an_alias_beside_the_value_it_names_is_read():
    assert siteyaml.loads("x: &a [1, &b [2], *b]\ny: [*a, *b]\n", "x") == {
        "x": [1, [2], [2]],
        "y": [[1, [2], [2]], [2]],
    }


def test_non_utf8_is_exit_2_naming_line_and_byte(tmp_path, capsys):
    data = EXAMPLE.read_bytes()
    at = data.index(b"acme-ai-lab")
    line = data.count(b"\n", 0, at) + 1
    column = at - (data.rfind(b"\n", 0, at) + 1) + 1
    f = _site(tmp_path, data[:at] + b"\xe9" + data[at + 1 :])
    rc, errors, out = _validate(f, capsys)
    assert rc == 2 and len(errors) == 1
    assert f"line {line}, byte {column} (0xe9): not UTF-8" in errors[0]
    assert "Traceback" not in out


# Found by tests/unit/test_fuzz_inputs.py: each was exit 70 (an unexpected ValueError,
# AttributeError or RecursionError out of PyYAML) or an error that ran onto a second line.
@pytest.mark.parametrize(
    "tail, says",
    [
        ("  built: 2001-13-45\n", "'2001-13-45' is not a valid timestamp (month must be in 1..12)"),
        ("  built: !!timestamp x\n", "'x' is not a valid timestamp"),
        ("  gpus: !!int four\n", "'four' is not a valid int (invalid literal for int()"),
        ("  n: " + "9" * 5000 + "\n", "is not a valid int (Exceeds the limit (4300 digits)"),
        ("  deep: " + "[" * 5000 + "\n", "nested more than 64 levels deep"),
        ("  deep:\n    " + "- " * 5000 + "x\n", "nested more than 64 levels deep"),
        ("  bell: \x07\n", "not valid YAML (character '\\x07': special characters are not allowed)"),
    ],
    ids=["date", "timestamp-tag", "int-tag", "int-digits", "flow-depth", "block-depth", "control-char"],
)
def test_what_pyyaml_cannot_build_is_one_line_naming_the_line(tmp_path, capsys, tail, says):
    text = EXAMPLE.read_text() + "role_vars:\n" + tail
    rc, errors, out = _validate(_site(tmp_path, text), capsys)
    assert rc == 2 and len(errors) == 1, out
    assert f"line {text.count(chr(10))}:" in errors[0] and says in errors[0]
    assert len(out.splitlines()) == 2 and "Traceback" not in out  # the error and its hint


def test_nesting_up_to_the_cap_is_read():
    inner = siteyaml.MAX_DEPTH - 1  # under the top-level mapping
    value = siteyaml.loads("a: " + "[" * inner + "]" * inner + "\n", "x")["a"]
    for _ in range(inner - 1):
        value = value[0]
    assert value == []
    with pytest.raises(ConfigError, match="line 1: nested more than 64 levels deep"):
        siteyaml.loads("a: " + "[" * (inner + 1) + "]" * (inner + 1) + "\n", "x")


@pytest.mark.parametrize(
    "field, edit",
    [
        ("site.name", lambda d: d["site"].update(name="{{ lookup('pipe', 'id') }}")),
        ("nodes[1].name", lambda d: d["nodes"][1].update(name="{% raw %}gpu1")),
        ("nfs.path", lambda d: d.update(nfs={"server": "10.0.0.5", "path": "/srv/{# x #}"})),
    ],
)
def test_a_jinja_marker_in_a_site_value_is_refused(tmp_path, capsys, field, edit):
    data = yaml.safe_load(EXAMPLE.read_text())
    edit(data)
    rc, errors, _ = _validate(_site(tmp_path, yaml.safe_dump(data)), capsys)
    assert rc == 2 and len(errors) == 1, errors
    assert f"{field}: holds " in errors[0] and "site values are data, never templates" in errors[0]


def test_role_vars_stay_templated_on_purpose(tmp_path):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["role_vars"] = {"node_join_token_ttl": "{{ '2h' }}"}
    assert load_site(_site(tmp_path, yaml.safe_dump(data))).role_vars["node_join_token_ttl"] == "{{ '2h' }}"


@pytest.mark.parametrize("name", sorted(PROTECTED_ROLE_VARS))
def test_a_role_var_that_keeps_a_control_on_cannot_be_set(tmp_path, capsys, name):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["role_vars"] = {name: ""}
    rc, errors, _ = _validate(_site(tmp_path, yaml.safe_dump(data)), capsys)
    assert rc == 2 and len(errors) == 1
    assert f"role_vars.{name}: not settable by a site" in errors[0]


def test_every_protected_name_is_a_role_default():
    # a renamed default would leave a stale name here and the control settable again
    assert set(PROTECTED_ROLE_VARS) <= known_role_vars()


def test_signature_checking_off_is_one_loud_line(tmp_path, capsys):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["bundle"]["require_signature"] = False
    rc, _, out = _validate(_site(tmp_path, yaml.safe_dump(data)), capsys)
    assert rc == 0
    loud = [line for line in out.splitlines() if "SIGNATURE IS NOT CHECKED" in line]
    assert len(loud) == 1 and loud[0].startswith("warning:")
    data["bundle"]["require_signature"] = True
    assert "NOT CHECKED" not in _validate(_site(tmp_path, yaml.safe_dump(data)), capsys)[2]


def test_siteedit_reads_strictly_too(tmp_path):
    from appliance_cli.core import siteedit

    f = _site(tmp_path, EXAMPLE.read_text().replace("site:\n", "site:\n  name: a\n", 1))
    with pytest.raises(ConfigError, match="key 'name' is given twice"):
        siteedit.site_without(f, "gpu2")


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_quote_makes_any_string_one_yaml_scalar(value):
    quote = inventory._env().filters["quote"]
    doc = yaml.safe_load(f"k: {quote(value)}\nafter: 1\n")
    assert doc == {"k": value, "after": 1}


def test_the_example_site_renders_the_same_values(tmp_path):
    cfg = siteconfig.load_site(EXAMPLE)
    out = inventory.render_inventory(cfg, tmp_path)
    gv = yaml.safe_load(out.group_vars_file.read_text())
    assert gv["appliance_site_name"] == cfg.site.name
    assert gv["ansible_ssh_common_args"] == inventory.ssh_common_args(cfg)
