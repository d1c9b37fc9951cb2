"""The chart_upgrade role's choice of releases (roles/chart_upgrade/filter_plugins/chart_upgrade.py):
those whose chart the new bundle carries at another version, or whose last upgrade failed."""

from __future__ import annotations

from tests._support.modules import load_file
from tests._support.paths import ROOT

f = load_file("chart_upgrade", ROOT / "roles" / "chart_upgrade" / "filter_plugins" / "chart_upgrade.py")

BUNDLE = {
    "nfs-subdir-external-provisioner": {"version": "4.0.18"},
    "gpu-operator": {"version": "v24.6.2"},
    "runai-backend": {"version": "2.13.5"},
    "runai-cluster": {"version": "2.13.5"},
}


def test_helms_name_version_is_split_at_the_version() -> None:
    assert f.split_chart("nfs-subdir-external-provisioner-4.0.18") == (
        "nfs-subdir-external-provisioner",
        "4.0.18",
    )
    assert f.split_chart("gpu-operator-v24.6.2") == ("gpu-operator", "v24.6.2")
    assert f.split_chart("runai-backend-2.13.5-rc.1") == ("runai-backend", "2.13.5-rc.1")
    assert f.split_chart("noversion") == ("noversion", "")


def test_only_older_or_failed_releases_of_bundled_charts_move_backend_before_cluster() -> None:
    releases = [
        {
            "name": "runai-cluster",
            "namespace": "runai",
            "chart": "runai-cluster-2.13.0",
            "status": "deployed",
        },
        {
            "name": "gpu-operator",
            "namespace": "gpu-operator",
            "chart": "gpu-operator-v24.6.2",
            "status": "deployed",
        },
        {
            "name": "runai-backend",
            "namespace": "runai-backend",
            "chart": "runai-backend-2.13.0",
            "status": "deployed",
        },
        {
            "name": "nfs",
            "namespace": "nfs",
            "chart": "nfs-subdir-external-provisioner-4.0.18",
            "status": "failed",
        },
        {"name": "mine", "namespace": "x", "chart": "somebody-elses-1.0.0", "status": "deployed"},
    ]
    got = f.pending(releases, BUNDLE)
    assert [(p["release"], p["namespace"], p["from"], p["to"]) for p in got] == [
        ("nfs", "nfs", "4.0.18", "4.0.18"),
        ("runai-backend", "runai-backend", "2.13.0", "2.13.5"),
        ("runai-cluster", "runai", "2.13.0", "2.13.5"),
    ]
    assert got[1]["chart"] == "runai-backend"


def test_nothing_moves_when_every_release_is_at_the_bundles_version() -> None:
    releases = [{"name": "gpu-operator", "namespace": "gpu-operator", "chart": "gpu-operator-v24.6.2"}]
    assert f.pending(releases, BUNDLE) == [] and f.pending([], BUNDLE) == []


def test_a_release_left_pending_is_rolled_back_first_and_one_gone_is_left() -> None:
    """helm list -a shows what the default list hides: a pending upgrade (a killed helm) moves,
    rolled back first; an uninstalled release kept in history does not."""
    releases = [
        {"name": "gpu-operator", "namespace": "gpu-operator", "chart": "gpu-operator-v24.6.2", "status": "pending-upgrade"},
        {"name": "nfs", "namespace": "nfs", "chart": "nfs-subdir-external-provisioner-4.0.17", "status": "uninstalled"},
        {"name": "runai-backend", "namespace": "runai-backend", "chart": "runai-backend-2.13.0", "status": "deployed"},
    ]  # fmt: skip
    got = {p["release"]: p["rollback"] for p in f.pending(releases, BUNDLE)}
    assert got == {"gpu-operator": True, "runai-backend": False}
