"""Make ``import pynvml`` give the vgpumon simulator, for running third-party exporters on it.

Put this directory first on ``PYTHONPATH`` and name a scenario (built-in name or file) in
``VGPUMON_BENCH_SCENARIO``: every later ``import pynvml`` in that interpreter (nvitop, a plain
loop) gets a module whose NVML functions are the simulator's, and whose constants, structures,
exception classes and pure-Python helpers are real pynvml's (the simulator takes them from there
too). Functions the simulator lacks are simply missing, as on an older driver.
``VGPUMON_SIM_LATENCY`` (see ``vgpumon/sim/core.py``) sets the simulated per-call costs.
"""

import inspect
import os
import sys
import types

_scenario = os.environ.get("VGPUMON_BENCH_SCENARIO")
if _scenario:
    import pynvml as _real

    from vgpumon import sim as _sim

    # Helpers of pynvml that call no NVML function: borrowed as they are.
    _HELPERS = {"nvmlExceptionClass", "nvmlStructToFriendlyObject", "nvmlFriendlyObjectToStruct"}
    _simulated = _sim.create(_scenario)
    _shim = types.ModuleType("pynvml", _real.__doc__)
    for _name, _value in vars(_real).items():
        _plain = not (inspect.isfunction(_value) or inspect.isbuiltin(_value))
        _dunder = _name.startswith("__") and _name not in ("__file__", "__version__")
        if (_name in _HELPERS or _plain) and not _dunder:
            _shim.__dict__[_name] = _value
    for _name in _simulated.implemented_functions:
        _shim.__dict__[_name] = getattr(_simulated, _name)
    _shim.__dict__["_vgpumon_simulated"] = _simulated
    sys.modules["pynvml"] = _shim
