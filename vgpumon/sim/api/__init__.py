"""API providers of the simulated NVML, one per NVML area (see ``vgpumon.sim.registry``)."""
