"""What nvidia-smi prints, read, and what of it is wrong for the hardware class.

Two forms, both as the 550 driver (the bundle's GPU Operator pins 550.90.07) prints them:
* `nvidia-smi -q -x`: XML after NVIDIA's `nvsmi_device_v12.dtd`, which the 550 binary carries and
  prints with `--dtd` (scripts/fetch_nvsmi_dtd.py takes it from Debian's nvidia-smi 550 package;
  the fixtures under tests/fixtures/gpu are checked against it);
* `nvidia-smi --query-gpu=F1,F2,... --format=csv,nounits`: a header line naming the fields, then
  one line per GPU; the fields are read by the header's names, so the script that asks decides
  which (diag.sh).
Unsupported values ("N/A", "[N/A]", "[Not Supported]") read as None: unknown, never healthy or
broken. The text comes from a node: XML with a DOCTYPE internal subset (entities) is refused."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from appliance_cli.core.checks.model import Status


class NvsmiError(ValueError):
    """nvidia-smi's output could not be read (the message says which part)."""


@dataclass(frozen=True)
class GpuState:
    bus_id: str
    name: str
    driver_version: str | None = None
    cuda_version: str | None = None
    persistence: bool | None = None
    mig_current: bool | None = None
    mig_pending: bool | None = None
    pcie_gen: int | None = None  # the link's current generation (it steps down when idle)
    pcie_gen_max: int | None = None  # the most the GPU and its slot can do together
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    ecc_enabled: bool | None = None
    ecc_volatile_uncorrected: int | None = None  # since the driver loaded
    ecc_aggregate_uncorrected: int | None = None  # over the GPU's life
    retired_pages: int | None = None
    retired_pending: bool | None = None
    remapped_uncorrectable: int | None = None
    remapped_pending: bool | None = None
    remapped_failure: bool | None = None


@dataclass(frozen=True)
class Finding:
    status: Status
    check: str  # pcie, ecc, memory, persistence, mig
    what: str
    hint: str


_UNKNOWN = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "unknown error"}


def _text(el: ET.Element | None, path: str) -> str | None:
    node = el.find(path) if el is not None else None
    value = (node.text or "").strip() if node is not None else ""
    return None if value.lower() in _UNKNOWN else value


def _int(value: str | None) -> int | None:
    """'4', '16x', '0' -> int; anything else (N/A) -> None."""
    m = re.fullmatch(r"(\d{1,9})x?", value or "")
    return int(m.group(1)) if m else None


def _flag(value: str | None) -> bool | None:
    v = (value or "").lower()
    if v in ("enabled", "yes", "on", "true"):
        return True
    if v in ("disabled", "no", "off", "false"):
        return False
    return None


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


# The three shapes of <volatile>/<aggregate> in nvsmi_device_v12.dtd: (single_bit, double_bit)
# before Ampere; sram/dram counts; sram split into parity and SEC-DED.
_UNCORRECTED = ("double_bit/total", "sram_uncorrectable", "sram_uncorrectable_parity",
                "sram_uncorrectable_secded", "dram_uncorrectable")  # fmt: skip


def _uncorrected(errors: ET.Element | None) -> int | None:
    if errors is None:
        return None
    return _sum([_int(_text(errors, p)) for p in _UNCORRECTED if errors.find(p) is not None])


_RETIREMENTS = ("multiple_single_bit_retirement", "double_bit_retirement")


def parse_xml(text: str) -> list[GpuState]:
    """Every <gpu> of `nvidia-smi -q -x`."""
    if "<!ENTITY" in text:
        raise NvsmiError("nvidia-smi -q -x: an XML entity declaration: not nvidia-smi's output")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise NvsmiError(f"nvidia-smi -q -x: not XML ({exc})") from None
    if root.tag != "nvidia_smi_log":
        raise NvsmiError(f"nvidia-smi -q -x: <{root.tag}> where <nvidia_smi_log> was expected")
    driver, cuda = _text(root, "driver_version"), _text(root, "cuda_version")
    return [_gpu(g, driver, cuda) for g in root.findall("gpu")]


def _gpu(g: ET.Element, driver: str | None, cuda: str | None) -> GpuState:
    link = g.find("pci/pci_gpu_link_info")
    retired = g.find("retired_pages")
    remapped = g.find("remapped_rows")
    return GpuState(
        bus_id=g.get("id") or _text(g, "pci/pci_bus_id") or "?",
        name=_text(g, "product_name") or "?",
        driver_version=driver,
        cuda_version=cuda,
        persistence=_flag(_text(g, "persistence_mode")),
        mig_current=_flag(_text(g, "mig_mode/current_mig")),
        mig_pending=_flag(_text(g, "mig_mode/pending_mig")),
        pcie_gen=_int(_text(link, "pcie_gen/current_link_gen")),
        pcie_gen_max=_int(_text(link, "pcie_gen/max_link_gen")),
        pcie_width=_int(_text(link, "link_widths/current_link_width")),
        pcie_width_max=_int(_text(link, "link_widths/max_link_width")),
        ecc_enabled=_flag(_text(g, "ecc_mode/current_ecc")),
        ecc_volatile_uncorrected=_uncorrected(g.find("ecc_errors/volatile")),
        ecc_aggregate_uncorrected=_uncorrected(g.find("ecc_errors/aggregate")),
        retired_pages=_sum([_int(_text(retired, f"{k}/retired_count")) for k in _RETIREMENTS]),
        retired_pending=_flag(_text(retired, "pending_retirement")),
        remapped_uncorrectable=_int(_text(remapped, "remapped_row_unc")),
        remapped_pending=_flag(_text(remapped, "remapped_row_pending")),
        remapped_failure=_flag(_text(remapped, "remapped_row_failure")),
    )


# --query-gpu field -> (GpuState attribute, reader)
_QUERY: dict[str, tuple[str, Callable[[str], Any]]] = {
    "pci.bus_id": ("bus_id", str),
    "name": ("name", str),
    "driver_version": ("driver_version", str),
    "persistence_mode": ("persistence", _flag),
    "mig.mode.current": ("mig_current", _flag),
    "mig.mode.pending": ("mig_pending", _flag),
    "pcie.link.gen.current": ("pcie_gen", _int),
    "pcie.link.gen.max": ("pcie_gen_max", _int),
    "pcie.link.width.current": ("pcie_width", _int),
    "pcie.link.width.max": ("pcie_width_max", _int),
    "ecc.mode.current": ("ecc_enabled", _flag),
    "ecc.errors.uncorrected.volatile.total": ("ecc_volatile_uncorrected", _int),
    "ecc.errors.uncorrected.aggregate.total": ("ecc_aggregate_uncorrected", _int),
    "retired_pages.pending": ("retired_pending", _flag),
}
QUERY_FIELDS = tuple(_QUERY)  # what diag.sh asks for; the parser also takes any subset


def parse_csv(text: str) -> list[GpuState]:
    """`--query-gpu=... --format=csv,nounits`: the header names the fields (a unit in brackets,
    as without nounits, is dropped); fields this module does not read are ignored."""
    rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r]
    if not rows:
        return []
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in rows[0]]
    if "pci.bus_id" not in header and "name" not in header:
        raise NvsmiError(f"nvidia-smi --query-gpu: no header line naming the fields (got {rows[0][:3]})")
    out = []
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise NvsmiError(
                f"nvidia-smi --query-gpu: line {n} has {len(row)} fields, the header {len(header)}"
            )
        values: dict[str, Any] = {"bus_id": "?", "name": "?"}
        for field, raw in zip(header, row, strict=True):
            if field in _QUERY and raw.strip().lower() not in _UNKNOWN:
                attr, read = _QUERY[field]
                values[attr] = read(raw.strip())
        out.append(GpuState(**values))
    return out


def findings(gpu: GpuState, pcie_gen: int | None = None, mig_wanted: bool | None = None) -> list[Finding]:
    """What is wrong with one GPU: `pcie_gen` the hardware class's PCIe generation, `mig_wanted`
    whether the site partitions its GPUs (gpu.mig); unknown values are no finding."""
    out: list[Finding] = []
    if pcie_gen and gpu.pcie_gen_max is not None and gpu.pcie_gen_max < pcie_gen:
        out.append(Finding(Status.FAIL, "pcie", f"PCIe gen {gpu.pcie_gen_max} at most (hardware class: gen {pcie_gen})",
                           "the slot, its riser or the BIOS holds the link down: check the BIOS's PCIe setting and reseat"))  # fmt: skip
    if gpu.pcie_width is not None and gpu.pcie_width_max and gpu.pcie_width < gpu.pcie_width_max:
        out.append(Finding(Status.WARN, "pcie", f"PCIe x{gpu.pcie_width} of x{gpu.pcie_width_max}",
                           "a link narrower than the GPU's: reseat the GPU or its riser"))  # fmt: skip
    if gpu.ecc_volatile_uncorrected:
        out.append(Finding(Status.FAIL, "ecc", f"{_errors(gpu.ecc_volatile_uncorrected)} since the driver loaded",
                           "jobs on it may crash: look for Xid 48 in the kernel log, drain the node and reset the GPU"))  # fmt: skip
    elif gpu.ecc_aggregate_uncorrected:
        out.append(Finding(Status.WARN, "ecc", f"{_errors(gpu.ecc_aggregate_uncorrected)} in its life",
                           "none since the driver loaded; watch it, and ask the vendor if it grows"))  # fmt: skip
    if gpu.ecc_enabled is False:
        out.append(
            Finding(Status.WARN, "ecc", "ECC disabled", "enable it: nvidia-smi -e 1, then reset the GPU")
        )
    if gpu.remapped_failure:
        out.append(Finding(Status.FAIL, "memory", "row remapping failed",
                           "the GPU's memory cannot be repaired in the field: ask the vendor for a replacement (RMA)"))  # fmt: skip
    elif gpu.remapped_pending:
        out.append(Finding(Status.FAIL, "memory", "row remapping pending",
                           "reset the GPU (drain the node, nvidia-smi -r) or reboot to apply it"))  # fmt: skip
    if gpu.retired_pending:
        out.append(
            Finding(Status.WARN, "memory", "page retirement pending", "reboot the node to retire the pages")
        )
    if gpu.persistence is False:
        out.append(Finding(Status.WARN, "persistence", "persistence mode off",
                           "every job pays the driver's start: run nvidia-persistenced (the driver container does)"))  # fmt: skip
    if gpu.mig_current is not None and gpu.mig_pending is not None and gpu.mig_current != gpu.mig_pending:
        out.append(Finding(Status.WARN, "mig", f"MIG mode {_onoff(gpu.mig_current)}, {_onoff(gpu.mig_pending)} after a reset",
                           "the change waits for a GPU reset: drain the node and reset the GPU"))  # fmt: skip
    elif mig_wanted is False and gpu.mig_current:
        out.append(Finding(Status.WARN, "mig", "MIG mode on, gpu.mig strategy none",
                           "the GPUs are partitioned where the site wants them whole: nvidia-smi -mig 0, or set gpu.mig"))  # fmt: skip
    return out


def worst(found: Iterable[Finding]) -> Status:
    """The findings' verdict: FAIL over WARN, PASS for none."""
    statuses = {f.status for f in found}
    return Status.FAIL if Status.FAIL in statuses else Status.WARN if statuses else Status.PASS


def _errors(n: int) -> str:
    return f"{n} uncorrected ECC error{'' if n == 1 else 's'}"


def _onoff(value: bool) -> str:
    return "on" if value else "off"


def summary(gpu: GpuState) -> str:
    """One line for a report: name, link, ECC and MIG as read."""
    parts = [gpu.name]
    if gpu.pcie_gen is not None or gpu.pcie_width is not None:
        parts.append(
            f"PCIe gen{gpu.pcie_gen or '?'}/{gpu.pcie_gen_max or '?'} x{gpu.pcie_width or '?'}/{gpu.pcie_width_max or '?'}"
        )
    if gpu.ecc_volatile_uncorrected is not None:
        parts.append(f"uncorrected ECC {gpu.ecc_volatile_uncorrected}")
    if gpu.mig_current is not None:
        parts.append(f"MIG {_onoff(gpu.mig_current)}")
    return ", ".join(parts)
