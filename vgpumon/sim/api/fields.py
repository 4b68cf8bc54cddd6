"""``nvmlDeviceGetFieldValues``: per-entry results, value types and scopes (docs/nvml-notes.md
§4.14).

The call itself succeeds while each entry carries its own ``nvmlReturn``: SUCCESS with the value in
the union member its ``valueType`` names, NOT_SUPPORTED (3) for fields the board lacks (NVLink on a
PCIe card, retired pages on Ampere+, module power off Grace), INVALID_ARGUMENT (2) for ids the R580
driver does not know. Known ids the simulator does not model (including the memory-max and GPU-max
T.Limit margins 195/196, whose values nobody recorded) answer 3, never a made-up value, unless the
scenario gives the GPU an answer for them (``field_values``, :mod:`vgpumon.sim.field_values`),
which wins over everything here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

from vgpumon.sim.core import nvml_error
from vgpumon.sim.field_values import FieldAnswer
from vgpumon.sim.registry import Provider, nvml_function, register_provider
from vgpumon.sim.scenario_keys import ARCHITECTURES
from vgpumon.sim.state import GpuState

UINT = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
ULL = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
SINT = pynvml.NVML_VALUE_TYPE_SIGNED_INT
DOUBLE = pynvml.NVML_VALUE_TYPE_DOUBLE
SLL = pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG
MEMBER = {UINT: "uiVal", ULL: "ullVal", SINT: "siVal"}
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
FIRST_UNKNOWN_FIELD_ID = 297  # MMA_STALL_PERCENT: R580 answers 2 from here on

# A getter returns the value, or raises NotApplicable for per-entry NOT_SUPPORTED.
Getter = Callable[[GpuState, float, int], int]


class NotApplicable(Exception):
    pass


def _ecc(key: str) -> Getter:
    def get(gpu: GpuState, t: float, scope: int) -> int:
        if not gpu.spec.ecc_supported or not gpu.spec.ecc_enabled:
            raise NotApplicable
        return gpu.spec.ecc_counts[key]

    return get


def _ecc_mode(pending: bool) -> Getter:
    def get(gpu: GpuState, t: float, scope: int) -> int:
        if not gpu.spec.ecc_supported:
            raise NotApplicable
        return int(gpu.spec.ecc_pending if pending else gpu.spec.ecc_enabled)

    return get


def _retired(gpu: GpuState, t: float, scope: int) -> int:
    if gpu.spec.architecture >= ARCHITECTURES["ampere"]:
        raise NotApplicable
    return 0


def _nvlink(value: Callable[[GpuState], int]) -> Getter:
    def get(gpu: GpuState, t: float, scope: int) -> int:
        if gpu.spec.nvlink_links == 0:
            raise NotApplicable
        return value(gpu)

    return get


def _power(kind: str) -> Getter:
    def get(gpu: GpuState, t: float, scope: int) -> int:
        if scope == 1:  # module power: Grace-Hopper only
            raise NotApplicable
        at = t if kind == "instant" else gpu.grid(t, 0.02)
        return round(gpu.power_watts(at) * 1000)

    return get


def _limit(attr: str) -> Getter:
    return lambda gpu, t, scope: round(getattr(gpu.spec, attr) * 1000)


def _margin(value: int) -> Getter:
    # Thresholds as T.Limit margins in °C, as a real driver reports them (docs/nvml-notes.md).
    return lambda gpu, t, scope: value


def _recovery(gpu: GpuState, t: float) -> int:
    # The scenario's timeline (vgpumon.sim.driver_health, an extension loaded after the core).
    from vgpumon.sim.driver_health import recovery_action

    action = recovery_action(gpu, t)
    if action is None:
        raise NotApplicable
    return action


def _mig_capable(gpu: GpuState, t: float, scope: int) -> int:
    if not gpu.spec.mig_capable:
        raise NotApplicable
    return 1


FIELDS: dict[int, tuple[int, Getter]] = {
    pynvml.NVML_FI_DEV_ECC_CURRENT: (ULL, _ecc_mode(pending=False)),
    pynvml.NVML_FI_DEV_ECC_PENDING: (ULL, _ecc_mode(pending=True)),
    pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: (ULL, _ecc("corrected_volatile")),
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: (ULL, _ecc("uncorrected_volatile")),
    pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: (ULL, _ecc("corrected_aggregate")),
    pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: (ULL, _ecc("uncorrected_aggregate")),
    pynvml.NVML_FI_DEV_RETIRED_SBE: (ULL, _retired),
    pynvml.NVML_FI_DEV_RETIRED_DBE: (ULL, _retired),
    pynvml.NVML_FI_DEV_RETIRED_PENDING: (ULL, _retired),
    74: (ULL, lambda gpu, t, scope: 0),  # PERF_POLICY_POWER / CLOCKS_EVENT_REASON_SW_POWER_CAP, ns
    75: (ULL, lambda gpu, t, scope: 0),  # PERF_POLICY_THERMAL, ns
    76: (ULL, lambda gpu, t, scope: 0),  # PERF_POLICY_SYNC_BOOST, ns
    pynvml.NVML_FI_DEV_MEMORY_TEMP: (
        UINT,
        lambda gpu, t, scope: round(gpu.temperature_memory(t)),
    ),
    pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: (
        ULL,
        lambda gpu, t, scope: int(gpu.energy_joules(t) * 1000),
    ),
    pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT: (UINT, _nvlink(lambda gpu: gpu.spec.nvlink_links)),
    138: (ULL, _nvlink(lambda gpu: 0)),  # NVLINK_THROUGHPUT_DATA_TX, KiB
    139: (ULL, _nvlink(lambda gpu: 0)),
    140: (ULL, _nvlink(lambda gpu: 0)),
    141: (ULL, _nvlink(lambda gpu: 0)),
    pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: (
        UINT,
        lambda gpu, t, scope: gpu.spec.pcie["replay_counter"],
    ),
    pynvml.NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER: (UINT, lambda gpu, t, scope: 0),
    142: (ULL, lambda gpu, t, scope: gpu.spec.remapped_rows[0]),
    143: (ULL, lambda gpu, t, scope: gpu.spec.remapped_rows[1]),
    144: (ULL, lambda gpu, t, scope: gpu.spec.remapped_rows[2]),
    145: (ULL, lambda gpu, t, scope: gpu.spec.remapped_rows[3]),
    pynvml.NVML_FI_DEV_IS_RESETLESS_MIG_SUPPORTED: (UINT, _mig_capable),
    pynvml.NVML_FI_DEV_POWER_AVERAGE: (UINT, _power("average")),
    pynvml.NVML_FI_DEV_POWER_INSTANT: (UINT, _power("instant")),
    187: (UINT, _limit("power_min_limit")),
    188: (UINT, _limit("power_max_limit")),
    189: (UINT, _limit("power_default_limit")),
    190: (UINT, _limit("power_limit")),
    192: (UINT, _limit("power_limit")),
    193: (SINT, _margin(-8)),
    194: (SINT, _margin(-2)),
    pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: (
        UINT,
        lambda gpu, t, scope: int(gpu.pcie_tx_total.at(t)) % 2**32,
    ),
    pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: (
        UINT,
        lambda gpu, t, scope: int(gpu.pcie_rx_total.at(t)) % 2**32,
    ),
    pynvml.NVML_FI_DEV_IS_MIG_MODE_INDEPENDENT_MIG_QUERY_CAPABLE: (UINT, _mig_capable),
    pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: (UINT, lambda gpu, t, scope: _recovery(gpu, t)),
    269: (ULL, lambda gpu, t, scope: 0),  # CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, ns
    270: (ULL, lambda gpu, t, scope: 0),
    271: (ULL, lambda gpu, t, scope: 0),
}
ALL_LINKS = 0xFFFFFFFF
# Per-link fields (scopeId = link): state, data throughput counters (KiB), DL error counters.
NVLINK_STATE, NVLINK_TX, NVLINK_RX = 165, 138, 139
NVLINK_REPLAY, NVLINK_RECOVERY, NVLINK_CRC = 161, 162, 163
_LINK_ERRORS = {
    NVLINK_REPLAY: "replay_errors",
    NVLINK_RECOVERY: "recovery_errors",
    NVLINK_CRC: "crc_errors",
}


def _per_link(fid: int, gpu: GpuState, t: float, scope: int) -> int:
    """A per-link NVLink field of a GPU whose scenario has an ``nvlink`` section.

    Without one, or for a link the board does not have, the entry answers not supported; so do
    the all-links scope of the state and error fields. The throughput counters of a down link stay
    at 0; an active link's grow at ``traffic`` bytes per second.
    """
    spec = gpu.spec.nvlink
    links = gpu.spec.nvlink_links
    if not spec or links == 0:
        raise NotApplicable
    down = set(spec.get("down", ()))
    if scope == ALL_LINKS and fid in (NVLINK_TX, NVLINK_RX):
        return sum(_per_link(fid, gpu, t, link) for link in range(links))
    if not 0 <= scope < links:
        raise NotApplicable
    if fid == NVLINK_STATE:
        return 0 if scope in down else 1
    if scope in down:
        return 0
    if fid in (NVLINK_TX, NVLINK_RX):
        return int(spec.get("traffic", 0) * max(t, 0.0)) // 1024
    return int(spec.get(_LINK_ERRORS[fid], 0))


def _link_field(fid: int, old: Getter | None) -> Getter:
    def get(gpu: GpuState, t: float, scope: int) -> int:
        if gpu.spec.nvlink:
            return _per_link(fid, gpu, t, scope)
        if old is None:
            raise NotApplicable
        return old(gpu, t, scope)

    return get


for _fid in (NVLINK_STATE, NVLINK_TX, NVLINK_RX, NVLINK_REPLAY, NVLINK_RECOVERY, NVLINK_CRC):
    _old = FIELDS.get(_fid)
    FIELDS[_fid] = (
        ULL if _fid != NVLINK_STATE else UINT,
        _link_field(_fid, _old[1] if _old else None),
    )

FIELDS[191] = (
    ULL,
    FIELDS[pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION][1],
)  # ENERGY, same counter as 83


@register_provider
class FieldValueApi(Provider):
    @nvml_function()
    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[Any]) -> Any:
        gpu = self.core.physical(handle)
        if len(fieldIds) == 0:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        t = self.core.t()
        stamp = self.core.timestamp_us(t)
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for i, field_id in enumerate(fieldIds):
            entry = values[i]
            try:
                (entry.fieldId, entry.scopeId) = field_id
            except TypeError:
                entry.fieldId = field_id
            entry.timestamp = stamp
            entry.latencyUsec = 0
            fid = entry.fieldId
            given: dict[int, FieldAnswer] = gpu.spec.extra.get("field_values", {})
            if fid in given:
                _answer_given(entry, given[fid])
                continue
            if fid == 0 or fid >= FIRST_UNKNOWN_FIELD_ID:
                entry.nvmlReturn = pynvml.NVML_ERROR_INVALID_ARGUMENT
                continue
            if fid not in FIELDS:
                entry.nvmlReturn = NOT_SUPPORTED
                continue
            value_type, getter = FIELDS[fid]
            try:
                value = getter(gpu, t, entry.scopeId)
            except NotApplicable:
                entry.nvmlReturn = NOT_SUPPORTED
                continue
            entry.valueType = value_type
            setattr(entry.value, MEMBER[value_type], value)
            entry.nvmlReturn = pynvml.NVML_SUCCESS
        return values


def _answer_given(entry: Any, value: FieldAnswer) -> None:
    """A scenario's own answer: NOT_SUPPORTED for None, else the value in the type a driver
    would use for it (unsigned or signed 64-bit integer, or double)."""
    if value is None:
        entry.nvmlReturn = NOT_SUPPORTED
        return
    if isinstance(value, float):
        entry.valueType, entry.value.dVal = DOUBLE, value
    elif value < 0:
        entry.valueType, entry.value.sllVal = SLL, value
    else:
        entry.valueType, entry.value.ullVal = ULL, value
    entry.nvmlReturn = pynvml.NVML_SUCCESS
