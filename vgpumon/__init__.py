"""vgpumon: observability for virtualized NVIDIA GPUs."""

__version__ = "0.1.0"
