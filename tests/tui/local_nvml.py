"""An NVML module for ``top --nvml-module local_nvml`` in the terminal tests: the simulator's
``kvm-vgpu-timesliced`` host posing as this machine's driver, so ``top`` runs as it does on a GPU
host (local mode: this host's ``/proc``, signals), not as ``--sim``."""

from __future__ import annotations

import sys

from vgpumon import sim

# The import system hands out what this name holds in sys.modules once the module has run.
sys.modules[__name__] = sim.create("kvm-vgpu-timesliced")  # type: ignore[assignment]
