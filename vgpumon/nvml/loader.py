"""Choosing and starting the NVML module (docs/design.md, rule 6: the module is injectable).

Order of precedence: ``--sim SCENARIO`` (the simulator), ``--nvml-module NAME``, the
``VGPUMON_NVML_MODULE`` environment variable, then ``pynvml`` from nvidia-ml-py. Nothing else in
vgpumon imports an NVML module.
"""

from __future__ import annotations

import importlib
import os
import time
from typing import TYPE_CHECKING, Any

from vgpumon.errors import VgpumonError, one_line
from vgpumon.nvml.errors import error_name
from vgpumon.nvml.session import NvmlSession

if TYPE_CHECKING:
    from vgpumon.sim import Scenario

ENV_MODULE = "VGPUMON_NVML_MODULE"

TRY_SIM_HINT = (
    "to try vgpumon without a GPU, add --sim SCENARIO, e.g. --sim kvm-vgpu-timesliced "
    "('vgpumon scenarios' lists the simulated hosts)"
)


class NvmlUnavailable(VgpumonError):
    """NVML could not be loaded or initialised."""


def resolve_module(
    sim: str | Scenario | None = None, module_name: str | None = None, clock: Any = None
) -> tuple[Any, str]:
    """Return (module, source label) without initialising it (``sim``: a scenario's name, file
    or the parsed scenario)."""
    if sim:
        from vgpumon import sim as simulator  # imported lazily: real hosts never load it

        module = simulator.create(sim, clock=clock)
        return module, f"sim:{module.scenario.name}"
    name = module_name or os.environ.get(ENV_MODULE) or "pynvml"
    module = _import(name)
    if not callable(getattr(module, "nvmlInit", None)):
        # A module that imports but is no NVML (``--nvml-module json``): the driver is not at fault.
        raise NvmlUnavailable(f"{name} is not an NVML module (it has no nvmlInit function)")
    return module, name


def _import(name: str) -> Any:
    """Import the module a user named; whatever its import does wrong is one line, not a traceback
    (its own code is not vgpumon's: a syntax error, an exception, even ``sys.exit``)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if name == "pynvml" and exc.name == "pynvml":
            raise NvmlUnavailable(
                f"the pynvml module is not installed (pip install nvidia-ml-py); {TRY_SIM_HINT}"
            ) from exc
        raise NvmlUnavailable(f"cannot import NVML module {name!r}: {one_line(exc)}") from exc
    except SyntaxError as exc:
        where = f" ({exc.filename}, line {exc.lineno})" if exc.filename else ""
        raise NvmlUnavailable(
            f"cannot import NVML module {name!r}: syntax error{where}: {one_line(exc.msg)}"
        ) from exc
    except SystemExit as exc:
        raise NvmlUnavailable(
            f"NVML module {name!r} called sys.exit({exc.code!r}) while being imported"
        ) from exc
    except Exception as exc:
        raise NvmlUnavailable(
            f"cannot import NVML module {name!r}: its import raised "
            f"{type(exc).__name__}: {one_line(exc)}"
        ) from exc


def open_session(
    sim: str | None = None,
    module_name: str | None = None,
    *,
    clock: Any = None,
    init_attempts: int = 1,
    backoff_seconds: float = 1.0,
) -> NvmlSession:
    """Import the module and nvmlInit it; one clear line on failure, never a traceback."""
    module, source = resolve_module(sim, module_name, clock)
    session = NvmlSession(module, source)
    delay = backoff_seconds
    for attempt in range(1, max(1, init_attempts) + 1):
        try:
            session.init()
            return session
        except Exception as exc:
            if attempt >= init_attempts:
                reason = str(exc) or error_name(exc)
                raise NvmlUnavailable(
                    f"NVML could not be loaded from {source} ({reason}); is the NVIDIA driver "
                    f"installed and loaded? {TRY_SIM_HINT}"
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
    raise AssertionError("unreachable")
