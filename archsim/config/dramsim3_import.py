"""Import a DRAMSim3 `.ini` as an archsim memory config, mirroring how DRAMSim3 itself reads the file.

What DRAMSim3 does with an HBM file (from its configuration.cc and timing.cc): `columns` is doubled (HBM's
2n prefetch), tRCDRD/tRCDWR replace tRCD, tRTP defaults to 5 when absent (tRTP_L/tRTP_S are not read),
tRC = tRAS + tRP, tRTRS defaults to 2, AL defaults to 0, ranks = channel_size / (size of one rank).
Its trace front end injects at most one request per cycle, which the imported `frontend` reproduces so
that the two simulators can be compared on the same trace. Every key archsim cannot honour is reported.
"""

from __future__ import annotations

import configparser
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archsim.errors import ConfigError
from archsim.inputs import read_text_input
from archsim.limits import INT64_MAX

# the protocols DRAMSim3 accepts (configuration.cc, GetDRAMProtocol: any other string aborts it)
DRAMSIM3_PROTOCOLS = ("DDR3", "DDR4", "GDDR5", "GDDR5X", "GDDR6", "LPDDR", "LPDDR3", "LPDDR4", "HBM", "HBM2", "HMC")
# DRAMSim3 defaults (configuration.cc, InitTimingParams/InitSystemParams) for keys a file may omit.
_TIMING_DEFAULTS = {"AL": 0, "CL": 12, "CWL": 12, "tCCD_L": 6, "tCCD_S": 4, "tRTRS": 2, "tRTP": 5, "tWTR_L": 5,
                    "tWTR_S": 5, "tWR": 10, "tRP": 10, "tRRD_L": 4, "tRRD_S": 4, "tRAS": 24, "tRFC": 74,
                    "tRFCb": 20, "tREFI": 7800, "tFAW": 50, "tRCDRD": 24, "tRCDWR": 20}
_IGNORED_BY_DRAMSIM3 = {
    ("dram_structure", "num_dies"): "read by DRAMSim3 but unused for JEDEC protocols",
    ("timing", "tRTP_L"): "not a key DRAMSim3 reads (it uses tRTP, default 5)",
    ("timing", "tRTP_S"): "not a key DRAMSim3 reads (it uses tRTP, default 5)",
    ("timing", "tCKSRE"): "not a key DRAMSim3 knows",
    ("timing", "tRPRE"): "read by DRAMSim3 but unused by its timing tables",
    ("timing", "tWPRE"): "read by DRAMSim3 but unused by its timing tables",
    ("timing", "tRCD"): "DRAMSim3 uses tRCDRD/tRCDWR for HBM and GDDR",
    ("system", "write_buf_size"): "read by DRAMSim3 but unused by its controller",
}
_NOT_MODELLED = {
    ("timing", "tXS"): "self-refresh exit (no power-down or self-refresh states in archsim)",
    ("timing", "tCKE"): "power-down entry (no power-down states in archsim)",
    ("timing", "tXP"): "power-down exit (no power-down states in archsim)",
    ("timing", "tCKESR"): "self-refresh (no self-refresh states in archsim)",
    ("timing", "tREFIb"): "per-bank refresh interval: archsim derives tREFI / banks per rank",
    ("timing", "tPPD"): "precharge-to-precharge (not modelled; 0 in DRAMSim3 for HBM)",
    ("timing", "t32AW"): "32-activation window (GDDR only)",
    ("system", "enable_self_refresh"): "self-refresh (not modelled)",
    ("system", "sref_threshold"): "self-refresh (not modelled)",
    ("system", "aggressive_precharging_enabled"): "unused in DRAMSim3",
    ("other", "epoch_period"): "DRAMSim3 reporting interval (archsim reports once per run)",
    ("other", "output_level"): "DRAMSim3 output verbosity",
    ("other", "output_prefix"): "DRAMSim3 output naming",
}
_HONOURED = {
    "dram_structure": {"protocol", "bankgroups", "banks_per_group", "rows", "columns", "device_width", "BL"},
    "timing": {"tCK", "AL", "CL", "CWL", "tRCDRD", "tRCDWR", "tRP", "tRAS", "tRFC", "tRFCb", "tREFI", "tRRD_S",
               "tRRD_L", "tWTR_S", "tWTR_L", "tFAW", "tWR", "tCCD_S", "tCCD_L", "tRTP", "tRTRS"},
    "system": {"channel_size", "channels", "bus_width", "address_mapping", "queue_structure", "row_buf_policy",
               "cmd_queue_size", "trans_queue_size", "unified_queue", "refresh_policy", "hbm_dual_cmd"},
    "power": set(),
    "other": set(),
}


@dataclass
class ImportResult:
    tree: dict[str, Any]
    not_honoured: list[str] = field(default_factory=list)


def _int(parser: configparser.ConfigParser, section: str, key: str, file: str, default: int | None = None,
         minimum: int = 0) -> int:
    if not parser.has_option(section, key):
        if default is None:
            raise ConfigError("missing key", file=file, where=f"{section}.{key}")
        return default
    text = parser.get(section, key).strip()
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"expected a number, got {text!r}", file=file, where=f"{section}.{key}") from None
    if not minimum <= value <= INT64_MAX or value != int(value):
        raise ConfigError(f"expected a whole number in [{minimum}, {INT64_MAX:,}], got {text!r}", file=file,
                          where=f"{section}.{key}")
    return int(value)


def _tck_ns(parser: configparser.ConfigParser, file: str) -> float:
    """The clock period; DRAMSim3's default is 1 ns."""
    text = parser.get("timing", "tCK", fallback="1").strip()
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"expected a number of ns, got {text!r}", file=file, where="timing.tCK") from None
    if not 0 < value < math.inf:
        raise ConfigError(f"must be a positive number of ns, got {text!r}", file=file, where="timing.tCK")
    return value


def import_dramsim3(path: str | Path) -> ImportResult:
    path = Path(path)
    file = str(path)
    parser = configparser.ConfigParser()
    parser.optionxform = str  # keys are case-sensitive (tRRD_S vs trrd_s)
    text = read_text_input(path, ConfigError, what=".ini")
    try:
        parser.read_string(text, source=file)
    except configparser.Error as exc:
        raise ConfigError(f"not a valid .ini: {exc.message.splitlines()[0]}", file=file) from None
    for section in ("dram_structure", "timing", "system"):
        if not parser.has_section(section):
            raise ConfigError(f"missing section [{section}]", file=file, where=section)
    notes: list[str] = []
    for section in parser.sections():
        for key in parser.options(section):
            if section == "power":
                notes.append(f"power.{key}: IDD/VDD currents are not used (archsim's energy model is an action-count "
                             f"table)")
            elif (section, key) in _IGNORED_BY_DRAMSIM3:
                notes.append(f"{section}.{key}: {_IGNORED_BY_DRAMSIM3[(section, key)]}")
            elif (section, key) in _NOT_MODELLED:
                notes.append(f"{section}.{key}: {_NOT_MODELLED[(section, key)]}")
            elif key not in _HONOURED.get(section, set()):
                notes.append(f"{section}.{key}: unknown key, not imported")

    protocol = parser.get("dram_structure", "protocol", fallback="DDR4").strip()
    if protocol not in DRAMSIM3_PROTOCOLS:
        raise ConfigError(f"unknown protocol {protocol!r} (DRAMSim3 knows {', '.join(DRAMSIM3_PROTOCOLS)})",
                          file=file, where="dram_structure.protocol")
    is_hbm = protocol in ("HBM", "HBM2")
    if protocol.startswith("GDDR") or protocol in ("HMC", "LPDDR", "LPDDR3", "LPDDR4"):
        notes.append(f"dram_structure.protocol: {protocol} specifics (burst timing, special commands) are not "
                     f"modelled; imported with JEDEC DDR-style timing rules")
    bankgroups = _int(parser, "dram_structure", "bankgroups", file, minimum=1)
    banks_per_group = _int(parser, "dram_structure", "banks_per_group", file, minimum=1)
    rows = _int(parser, "dram_structure", "rows", file, minimum=1)
    columns = _int(parser, "dram_structure", "columns", file, minimum=1) * (2 if is_hbm else 1)
    device_width = _int(parser, "dram_structure", "device_width", file, minimum=1)
    burst_length = _int(parser, "dram_structure", "BL", file, 8, minimum=1)
    bus_width = _int(parser, "system", "bus_width", file, 64, minimum=1)
    channels = _int(parser, "system", "channels", file, 1, minimum=1)
    channel_size_mb = _int(parser, "system", "channel_size", file, 1024, minimum=1)
    if bus_width % device_width:
        raise ConfigError(f"bus_width {bus_width} is not a multiple of device_width {device_width}", file=file,
                          where="system.bus_width")
    devices_per_rank = bus_width // device_width
    page_bytes = columns * device_width // 8
    rank_bytes = page_bytes * rows * bankgroups * banks_per_group * devices_per_rank
    ranks = max(1, channel_size_mb * 2**20 // rank_bytes)
    # archsim counts columns in bus-width words per row of the whole rank (all devices side by side)
    row_words = columns * devices_per_rank * device_width // bus_width

    tck_ns = _tck_ns(parser, file)
    t = {key: _int(parser, "timing", key, file, default) for key, default in _TIMING_DEFAULTS.items()}
    if t["AL"]:
        notes.append(f"timing.AL: additive latency {t['AL']} folded into CL and CWL (read/write latency = AL + CL/CWL)")
    rate_gbps = 2.0 / tck_ns  # JEDEC DDR: two beats per clock
    timing = {
        "data_rate": f"{rate_gbps:g}Gbps", "tCK": f"{tck_ns:g}ns",
        "CL": t["AL"] + t["CL"], "CWL": t["AL"] + t["CWL"],
        "tRCDRD": t["tRCDRD"], "tRCDWR": t["tRCDWR"], "tRP": t["tRP"], "tRAS": t["tRAS"],
        "tRC": t["tRAS"] + t["tRP"],
        "tCCD_S": t["tCCD_S"], "tCCD_L": t["tCCD_L"], "tRRD_S": t["tRRD_S"], "tRRD_L": t["tRRD_L"],
        "tFAW": t["tFAW"], "tWTR_S": t["tWTR_S"], "tWTR_L": t["tWTR_L"], "tRTP": t["tRTP"], "tWR": t["tWR"],
        "tRTRS": t["tRTRS"], "tRFC": t["tRFC"], "tRFCpb": min(t["tRFCb"], t["tRFC"]), "tRREFD": t["tRRD_S"],
        "tREFI": t["tREFI"],
    }
    notes.append(f"timing.tRREFD: DRAMSim3 has no REFpb-to-REFpb gap; set to tRRD_S ({t['tRRD_S']})")

    mapping = parser.get("system", "address_mapping", fallback="chrobabgraco").strip()
    policy_text = parser.get("system", "row_buf_policy", fallback="OPEN_PAGE").strip()
    if policy_text == "OPEN_PAGE":
        # DRAMSim3 lets pending row hits go first for at most 4 column commands per activation
        row_policy: Any = {"impl": "open_cap", "cap": 4}
    elif policy_text == "CLOSE_PAGE":
        row_policy = "closed"
        notes.append("system.row_buf_policy: CLOSE_PAGE auto-precharges every access in DRAMSim3; archsim's "
                     "`closed` keeps the row open for requests already queued to it")
    else:
        raise ConfigError(f"unknown row_buf_policy {policy_text!r} (OPEN_PAGE or CLOSE_PAGE)", file=file,
                          where="system.row_buf_policy")
    queue_structure = parser.get("system", "queue_structure", fallback="PER_BANK").strip()
    cmd_queue = _int(parser, "system", "cmd_queue_size", file, 16)
    trans_queue = _int(parser, "system", "trans_queue_size", file, 32)
    if queue_structure != "PER_BANK":
        notes.append(f"system.queue_structure: {queue_structure} command queues are approximated by per-bank "
                     f"queues of cmd_queue_size")
    if parser.get("system", "unified_queue", fallback="False").strip().lower() in ("true", "1", "yes"):
        notes.append("system.unified_queue: a unified read/write transaction queue is approximated by separate "
                     "read and write queues of trans_queue_size each")
    refresh_policy = parser.get("system", "refresh_policy", fallback="RANK_LEVEL_STAGGERED").strip()
    # a pending refresh holds its rank's (bank's) command queues, column commands included
    refresh: Any = {"impl": "per_bank" if refresh_policy == "BANK_LEVEL_STAGGERED" else "all_bank", "stagger": False,
                    "hold_columns": True}
    capacity_bytes = channels * ranks * rank_bytes
    tree = {
        "memory": {
            "preset": None,
            "organization": {
                "stacks": 1, "channels": channels, "pseudo_channels": 1, "ranks": ranks,
                "bankgroups": bankgroups, "banks_per_group": banks_per_group, "rows": rows,
                "columns": row_words, "bus_width_bits": bus_width, "burst_length": burst_length,
                "capacity": f"{capacity_bytes // 2**20}MiB" if capacity_bytes % 2**30 else
                f"{capacity_bytes // 2**30}GiB",
            },
            "timing": timing,
            "address_mapping": {"scheme": mapping},
            "controller": {
                "read_queue_depth": trans_queue, "write_queue_depth": trans_queue,
                "bank_queue_depth": cmd_queue, "scheduler": "round_robin", "row_policy": row_policy,
                # DRAMSim3 drains on a full write buffer, or above 8 writes when every command queue is empty
                "write_drain": {"high_watermark": trans_queue, "low_watermark": 0, "idle_threshold": 8},
                "refresh": refresh, "frontend_delay_cycles": 1, "write_queue_forwarding": True,
            },
            "frontend": {"max_injections_per_cycle": 1, "posted_writes": True},
        }
    }
    del tree["memory"]["preset"]
    return ImportResult(tree, notes)
