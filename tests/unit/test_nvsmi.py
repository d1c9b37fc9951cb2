"""nvidia-smi's output read (appliance_cli/core/checks/nvsmi.py): the fixtures are valid against
NVIDIA's nvsmi_device_v12.dtd as the 550 driver carries it (scripts/fetch_nvsmi_dtd.py puts it in
build/nvidia), diag.sh asks only for --query-gpu fields the 550 binary knows, and the parsers read
every shape the DTD allows."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from appliance_cli.core.checks import nvsmi
from appliance_cli.core.checks.model import Status
from tests._support.paths import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "gpu"
NVIDIA = ROOT / "build" / "nvidia"  # scripts/bootstrap.sh -> scripts/fetch_nvsmi_dtd.py
DIAG = ROOT / "appliance_cli" / "core" / "checks" / "diag.sh"
XML_FIXTURES = sorted(FIXTURES.glob("*.xml"))


def _dtd() -> Path:
    dtd = NVIDIA / "nvsmi_device_v12.dtd"
    assert dtd.is_file(), f"{dtd} is missing: run scripts/bootstrap.sh (it fetches NVIDIA's DTD)"
    assert dtd.read_text().startswith("<!-- nvsmi_device_v12.dtd -->")
    return dtd


@pytest.mark.parametrize("fixture", XML_FIXTURES, ids=lambda p: p.name)
def test_each_xml_fixture_is_valid_against_nvidias_dtd(fixture: Path) -> None:
    assert shutil.which("xmllint"), "xmllint is missing: scripts/bootstrap.sh installs libxml2-utils"
    r = subprocess.run(["xmllint", "--noout", "--nonet", "--dtdvalid", str(_dtd()), str(fixture)],
                       capture_output=True, text=True, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr


def test_the_dtd_check_is_a_real_one(tmp_path: Path) -> None:
    """A fixture without one element the DTD requires is refused (so the test above can fail)."""
    broken = tmp_path / "broken.xml"
    broken.write_text(XML_FIXTURES[0].read_text().replace("<fan_speed>N/A</fan_speed>", "", 1))
    r = subprocess.run(["xmllint", "--noout", "--nonet", "--dtdvalid", str(_dtd()), str(broken)],
                       capture_output=True, text=True, check=False)  # fmt: skip
    assert r.returncode != 0 and "does not validate" in r.stderr


def _diag_fields() -> list[str]:
    (query,) = re.findall(r"--query-gpu=([a-z0-9_.,]+)", DIAG.read_text())
    return query.split(",")


def test_diag_asks_only_for_fields_the_550_binary_knows() -> None:
    binary = NVIDIA / "nvidia-smi"
    assert binary.is_file(), f"{binary} is missing: run scripts/bootstrap.sh"
    data = binary.read_bytes()
    fields = _diag_fields()
    assert set(nvsmi.QUERY_FIELDS) <= set(fields)  # everything the parser reads is asked for
    assert [f for f in fields if f.encode() + b"\0" not in data] == []
    assert b"no.such.field\0" not in data


def test_the_csv_fixtures_are_what_diag_asks_for() -> None:
    for fixture in FIXTURES.glob("query-gpu-*.csv"):
        header = fixture.read_text().splitlines()[0].split(", ")
        assert [re.sub(r" \[.*\]$", "", h) for h in header] == _diag_fields(), fixture.name


def test_the_healthy_gz2_reads_whole_and_finds_nothing() -> None:
    gpus = nvsmi.parse_xml((FIXTURES / "gz2-healthy.xml").read_text())
    assert len(gpus) == 8 and {g.name for g in gpus} == {"NVIDIA A100-SXM4-80GB"}
    g = gpus[0]
    assert (g.bus_id, g.driver_version, g.cuda_version) == ("00000000:07:00.0", "550.90.07", "12.4")
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) == (4, 4, 16, 16)
    assert (g.persistence, g.mig_current, g.mig_pending, g.ecc_enabled) == (True, False, False, True)
    assert (g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected) == (0, 0)
    assert (g.remapped_uncorrectable, g.remapped_pending, g.remapped_failure) == (0, False, False)
    assert (g.retired_pages, g.retired_pending) == (None, None)  # A100: N/A, rows are remapped instead
    assert [nvsmi.findings(g, pcie_gen=4, mig_wanted=False) for g in gpus] == [[]] * 8
    csv_gpus = nvsmi.parse_csv((FIXTURES / "query-gpu-gz2-healthy.csv").read_text())
    assert [nvsmi.findings(g, pcie_gen=4, mig_wanted=False) for g in csv_gpus] == [[]] * 8


def _kinds(gpus: list[nvsmi.GpuState]) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for g in gpus:
        for f in nvsmi.findings(g, pcie_gen=4, mig_wanted=False):
            out.setdefault(g.bus_id, []).append((f.status.value, f.check))
    return out


def test_the_degraded_gz2_reads_the_same_from_xml_and_csv() -> None:
    xml = _kinds(nvsmi.parse_xml((FIXTURES / "gz2-degraded.xml").read_text()))
    csv_ = _kinds(nvsmi.parse_csv((FIXTURES / "query-gpu-gz2-degraded.csv").read_text()))
    assert xml == {
        "00000000:47:00.0": [("fail", "pcie")],
        "00000000:87:00.0": [("warn", "pcie")],
        "00000000:90:00.0": [("fail", "ecc"), ("fail", "memory")],
        "00000000:B7:00.0": [("warn", "persistence"), ("warn", "mig")],
        "00000000:BD:00.0": [("warn", "ecc")],
    }
    # the CSV has no row remapping fields: everything else agrees
    assert csv_ == {k: [f for f in v if f[1] != "memory"] for k, v in xml.items()}


def _log(gpu_body: str) -> str:
    return f"<nvidia_smi_log><driver_version>550.90.07</driver_version><gpu id='0'>{gpu_body}</gpu></nvidia_smi_log>"


@pytest.mark.parametrize(
    "errors, want",
    [
        ("<double_bit><device_memory>1</device_memory><total>3</total></double_bit>", 3),  # before Ampere
        ("<sram_uncorrectable>1</sram_uncorrectable><dram_uncorrectable>2</dram_uncorrectable>", 3),
        (
            "<sram_uncorrectable_parity>1</sram_uncorrectable_parity><sram_uncorrectable_secded>4</sram_uncorrectable_secded>"
            "<dram_uncorrectable>0</dram_uncorrectable>",
            5,
        ),
        ("<sram_uncorrectable>N/A</sram_uncorrectable><dram_uncorrectable>N/A</dram_uncorrectable>", None),
    ],
    ids=["single-double-bit", "sram-dram", "parity-secded", "not-supported"],
)
def test_each_ecc_shape_of_the_dtd_is_summed(errors: str, want: int | None) -> None:
    (g,) = nvsmi.parse_xml(_log(f"<ecc_errors><volatile>{errors}</volatile></ecc_errors>"))
    assert g.ecc_volatile_uncorrected == want


def test_failures_and_refusals() -> None:
    (g,) = nvsmi.parse_xml(_log("<remapped_rows><remapped_row_failure>Yes</remapped_row_failure></remapped_rows>"
                                "<mig_mode><current_mig>Enabled</current_mig><pending_mig>Enabled</pending_mig></mig_mode>"))  # fmt: skip
    found = {(f.status, f.check, f.what) for f in nvsmi.findings(g, mig_wanted=False)}
    assert found == {(Status.FAIL, "memory", "row remapping failed"),
                     (Status.WARN, "mig", "MIG mode on, gpu.mig strategy none")}  # fmt: skip
    assert [f.check for f in nvsmi.findings(g, mig_wanted=True)] == ["memory"]  # MIG where the site wants it
    bomb = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>'
    with pytest.raises(nvsmi.NvsmiError, match="entity declaration"):
        nvsmi.parse_xml(bomb)
    with pytest.raises(nvsmi.NvsmiError, match="not XML"):
        nvsmi.parse_xml("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    with pytest.raises(nvsmi.NvsmiError, match="<html> where <nvidia_smi_log>"):
        nvsmi.parse_xml("<html/>")
    with pytest.raises(nvsmi.NvsmiError, match="no header line"):
        nvsmi.parse_csv("0, NVIDIA A100-SXM4-80GB, 0\n")
    with pytest.raises(nvsmi.NvsmiError, match="line 2 has 2 fields, the header 3"):
        nvsmi.parse_csv("pci.bus_id, name, pcie.link.gen.max\n00:07.0, A100\n")
    assert nvsmi.parse_csv("") == []
