"""helm's merge of user values over a chart's values (appliance_cli/rules/helmvalues.py), read by
the gpu_operator and scheduler_stack filter plugins and by the bundle's completeness check."""

from __future__ import annotations

from appliance_cli.rules.helmvalues import coalesce


def test_maps_merge_key_by_key_and_the_rest_is_replaced() -> None:
    base = {"image": {"repository": "nvcr.io/nvidia/driver", "tag": "1"}, "args": ["a", "b"], "n": 1}
    over = {"image": {"tag": "2"}, "args": ["c"], "extra": {"x": 1}}
    assert coalesce(base, over) == {
        "image": {"repository": "nvcr.io/nvidia/driver", "tag": "2"},
        "args": ["c"],
        "n": 1,
        "extra": {"x": 1},
    }


def test_a_null_removes_the_key_as_helm_does() -> None:
    assert coalesce({"a": {"b": 1}, "c": 2}, {"a": None}) == {"c": 2}
    assert coalesce({"a": {"b": 1, "c": 2}}, {"a": {"b": None}}) == {"a": {"c": 2}}


def test_a_map_over_a_scalar_and_a_scalar_over_a_map() -> None:
    assert coalesce({"a": "x"}, {"a": {"b": 1}}) == {"a": {"b": 1}}
    assert coalesce({"a": {"b": 1}}, {"a": "x"}) == {"a": "x"}
    assert coalesce(None, {"a": 1}) == {"a": 1}


def test_neither_input_is_changed_nor_shared() -> None:
    base, over = {"a": {"b": [1]}}, {"a": {"c": [2]}}
    out = coalesce(base, over)
    out["a"]["b"].append(9)
    out["a"]["c"].append(9)
    assert base == {"a": {"b": [1]}} and over == {"a": {"c": [2]}}
