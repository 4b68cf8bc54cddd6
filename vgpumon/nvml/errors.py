"""What an NVML failure means for the collector.

docs/design.md, rule 3: every error is classified once, here, so that readers never decide on their
own whether an error is "no value", "GPU gone" or "something to count".

* ``ABSENT``: the value does not exist on this GPU / driver / permission level. The reader records
  ``None`` and the guard remembers the (GPU, call) pair so the call is never made again.
* ``LIFECYCLE``: the GPU or the library is gone (GPU lost, NVML uninitialised, driver unloaded,
  library/kernel-module mismatch). The GPU is marked down and NVML is re-initialised with backoff.
* ``COUNTED``: anything else (timeouts, unknown errors, ...). The value is ``None`` for this cycle
  and the error is counted in ``vgpumon_nvml_errors_total{function,error}``.
"""

from __future__ import annotations

import enum
from typing import Any


class ErrorClass(enum.Enum):
    ABSENT = "absent"
    LIFECYCLE = "lifecycle"
    COUNTED = "counted"


# NVML return codes (docs/nvml-notes.md §2.1). Kept here, not read from pynvml, so that any NVML
# module (the simulator, a vendor shim) is classified the same way.
CODE_NAMES: dict[int, str] = {
    0: "success",
    1: "uninitialized",
    2: "invalid_argument",
    3: "not_supported",
    4: "no_permission",
    5: "already_initialized",
    6: "not_found",
    7: "insufficient_size",
    8: "insufficient_power",
    9: "driver_not_loaded",
    10: "timeout",
    11: "irq_issue",
    12: "library_not_found",
    13: "function_not_found",
    14: "corrupted_inforom",
    15: "gpu_is_lost",
    16: "reset_required",
    17: "operating_system",
    18: "lib_rm_version_mismatch",
    19: "in_use",
    20: "memory",
    21: "no_data",
    22: "vgpu_ecc_not_supported",
    23: "insufficient_resources",
    24: "freq_not_supported",
    25: "argument_version_mismatch",
    26: "deprecated",
    27: "not_ready",
    28: "gpu_not_found",
    29: "invalid_state",
    30: "reset_type_not_supported",
    999: "unknown",
}

# The codes the collectors name, as in nvml.h's nvmlReturn_t (NVML_SUCCESS, NVML_ERROR_*). Every
# module imports them from here: the one place NVML's numbers are written (docs/design.md, rule 11).
SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
NO_DATA = 21

ABSENT_CODES = frozenset({NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND})
LIFECYCLE_CODES = frozenset(
    {UNINITIALIZED, DRIVER_NOT_LOADED, GPU_IS_LOST, LIB_RM_VERSION_MISMATCH}
)
# Lifecycle codes that mean the whole library must be re-initialised, not just one GPU.
LIBRARY_CODES = frozenset({UNINITIALIZED, DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH})


def error_code(exc: BaseException) -> int | None:
    """The NVML return code carried by an exception, or None for non-NVML exceptions.

    pynvml keeps the code in ``.value`` (not ``.args``, which is empty for subclass instances).
    """
    value: Any = getattr(exc, "value", None)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def error_name(exc: BaseException) -> str:
    code = error_code(exc)
    if code is not None:
        return CODE_NAMES.get(code, f"code_{code}")
    # Not an NVMLError: pynvml's own bugs (UnboundLocalError, TypeError) and
    # NVMLLibraryMismatchError on pre-R510 drivers (docs/nvml-notes.md §1.2, §11).
    if type(exc).__name__ == "NVMLLibraryMismatchError":
        return "library_mismatch"
    return "python_" + type(exc).__name__.lower()


def classify(exc: BaseException) -> ErrorClass:
    code = error_code(exc)
    if code is None:
        # A wrapper that cannot work with this driver is as good as a missing function.
        if type(exc).__name__ == "NVMLLibraryMismatchError" or isinstance(exc, AttributeError):
            return ErrorClass.ABSENT
        return ErrorClass.COUNTED
    if code in ABSENT_CODES:
        return ErrorClass.ABSENT
    if code in LIFECYCLE_CODES:
        return ErrorClass.LIFECYCLE
    return ErrorClass.COUNTED
