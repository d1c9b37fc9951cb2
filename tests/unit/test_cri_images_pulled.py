"""The helm role's cri_images_pulled module (roles/helm/library/cri_images_pulled.py), driven
against a crictl double that answers each argv: one `crictl images -o json` answers for every
image it lists exactly; the others are asked about one by one, and pulled. An image that cannot
be pulled fails the task in one line naming the node, the release, the registry and the reason."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests._support.modules import FakeModule, ModuleFailed, load_role_module

m = load_role_module("helm", "cri_images_pulled")

LISTED = "master1:5000/nvidia/gpu-operator:v24.6.2"
OTHER = "master1:5000/nvidia/cuda:12.6.1-base-ubi8"
CRICTL = "/usr/local/bin/crictl"


def _listing(*tags: str) -> str:
    return json.dumps({"images": [{"id": "sha256:1", "repoTags": list(tags), "repoDigests": []}]}, indent=2)


def _module(
    *images: str, listing: str | None, known: set[str] = frozenset(), check: bool = False
) -> FakeModule:
    """LISTING is what `images -o json` prints (None: it fails); inspecti succeeds for KNOWN;
    pull succeeds unless the reference contains 'absent'."""

    def answer(argv: list[str], _data: Any) -> tuple[int, str, str]:
        assert argv[0] == CRICTL
        if argv[1:] == ["images", "-o", "json"]:
            return (0, listing, "") if listing is not None else (1, "", "connect: no such file")
        if argv[1] == "inspecti":
            return (0, "{}", "") if argv[2] in known else (1, "", "not found")
        if argv[1] == "pull":
            return (
                (1, "", "rpc error:\n  not found\n")
                if "absent" in argv[2]
                else (0, "Image is up to date", "")
            )
        raise AssertionError(argv)

    params = {
        "images": list(images),
        "node": "worker1",
        "release": "gpu-operator",
        "registry": "master1:5000",
    }
    return FakeModule(params, check_mode=check, answer=answer)


def test_listed_images_cost_one_call_and_the_others_are_asked_then_pulled() -> None:
    mod = _module(LISTED, OTHER, listing=_listing(LISTED))
    out = m.converge(mod, CRICTL)
    assert (out["changed"], out["present"], out["pulled"], out["missing"]) == (True, [LISTED], [OTHER], [])
    assert mod.ran == [
        [CRICTL, "images", "-o", "json"],
        [CRICTL, "inspecti", OTHER],
        [CRICTL, "pull", OTHER],
    ]


def test_every_image_present_changes_nothing() -> None:
    mod = _module(LISTED, OTHER, listing=_listing(LISTED), known={OTHER})
    out = m.converge(mod, CRICTL)
    assert (out["changed"], out["present"], out["pulled"]) == (False, [LISTED, OTHER], [])


def test_an_image_that_cannot_be_pulled_fails_in_one_line_naming_node_release_and_reason() -> None:
    absent = "master1:5000/absent/x:1"
    mod = _module(LISTED, absent, OTHER, listing=_listing(LISTED))
    with pytest.raises(ModuleFailed) as e:
        m.converge(mod, CRICTL)
    assert str(e.value) == (
        f"worker1 could not pull 1 image(s) of gpu-operator from master1:5000: {absent} rpc error: not found"
        " — the private registry lacks them: the whole install (no --tags) seeds it again from the bundle;"
        " if the bundle lacks them too, add them to the profile's images and rebuild"
    )
    assert "\n" not in str(e.value)
    assert e.value.result["pulled"] == [OTHER]  # the others were still pulled


def test_a_reference_is_an_argv_element_never_shell_text() -> None:
    hostile = "master1:5000/x:1; touch /tmp/owned"
    mod = _module(hostile, listing=_listing())
    m.converge(mod, CRICTL)
    assert [CRICTL, "pull", hostile] in mod.ran


def test_only_an_exact_reference_counts_as_listed() -> None:
    """A prefix of a listed tag, or a pattern, is not present by the listing."""
    prefix, pattern = LISTED.rsplit(":", 1)[0], "master1:5000/nvidia/*"
    out = m.converge(_module(prefix, pattern, listing=_listing(LISTED)), CRICTL)
    assert out["pulled"] == [prefix, pattern]


@pytest.mark.parametrize("listing", [None, "not json", "[]"])
def test_a_failed_or_odd_listing_falls_back_to_one_question_per_image(listing: str | None) -> None:
    mod = _module(LISTED, listing=listing, known={LISTED})
    out = m.converge(mod, CRICTL)
    assert out["present"] == [LISTED]
    assert mod.ran == [[CRICTL, "images", "-o", "json"], [CRICTL, "inspecti", LISTED]]


def test_check_mode_pulls_nothing() -> None:
    mod = _module(LISTED, OTHER, listing=_listing(LISTED), check=True)
    out = m.converge(mod, CRICTL)
    assert (out["changed"], out["present"], out["absent"]) == (False, [LISTED], [OTHER])
    assert not [c for c in mod.ran if c[1] == "pull"]


REF = "master1:5000/nvidia/k8s-device-plugin:v0.16.2-ubi8"
# What crictl 1.23 prints when containerd 1.6's CRI plugin cannot resolve a tag: logrus' non-tty
# line, its msg Go-quoted (%q), after a warning line of its own.
CRICTL_NOT_FOUND = (
    'time="2026-11-30T21:08:20+00:00" level=warning msg="image connect using default endpoints: '
    '[unix:///var/run/dockershim.sock unix:///run/containerd/containerd.sock]"\n'
    'time="2026-11-30T21:08:21+00:00" level=fatal msg="pulling image: rpc error: code = NotFound desc = '
    f'failed to pull and unpack image \\"{REF}\\": failed to resolve reference \\"{REF}\\": {REF}: not found"\n'
)


def test_crictls_reason_is_its_fatal_msg_unquoted_with_its_end_kept() -> None:
    """The logrus prefix and the warning go; the msg's escaped quotes are unescaped; this msg fits
    whole (with the prefix, the old 300 characters ended at `…/k8s-dev`)."""
    reason = m.reason_of(CRICTL_NOT_FOUND)
    assert reason.startswith(
        f'pulling image: rpc error: code = NotFound desc = failed to pull and unpack image "{REF}"'
    )
    assert reason.endswith(f'failed to resolve reference "{REF}": {REF}: not found')
    assert "time=" not in reason and "level=" not in reason and '\\"' not in reason
    assert " … " not in reason and len(reason) <= m.REASON_CHARS


def test_a_msg_over_the_limit_keeps_its_head_and_its_end() -> None:
    long_ref = "master1:5000/" + "a/" * 150 + "x:1"
    reason = m.reason_of(CRICTL_NOT_FOUND.replace(REF, long_ref))
    assert len(reason) == m.REASON_CHARS
    assert reason.startswith("pulling image: rpc error: code = NotFound") and reason.endswith(
        "x:1: not found"
    )
    assert " … " in reason


def test_a_short_msg_is_whole_and_text_that_is_not_logrus_is_kept_folded() -> None:
    assert (
        m.reason_of('time="t" level=fatal msg="no such image \\"x:1\\" present"\n')
        == 'no such image "x:1" present'
    )
    assert m.reason_of('time="t" level=fatal msg=unquoted\n') == "unquoted"
    assert m.reason_of("rpc error:\n  not found\n") == "rpc error: not found"
    assert m.reason_of("") == ""


def test_the_failure_line_carries_crictls_cause() -> None:
    def answer(argv: list[str], _data: Any) -> tuple[int, str, str]:
        if argv[1:] == ["images", "-o", "json"]:
            return 0, _listing(), ""
        return (1, "", "not found") if argv[1] == "inspecti" else (1, "", CRICTL_NOT_FOUND)

    mod = FakeModule({"images": [REF], "node": "worker1", "release": "gpu-operator", "registry": "master1:5000"},
                     check_mode=False, answer=answer)  # fmt: skip
    with pytest.raises(ModuleFailed) as e:
        m.converge(mod, CRICTL)
    assert f"{REF}: not found — the private registry lacks them" in str(e.value)
