"""nvidia-smi's XML reports turned into the same :class:`~vgpumon.model.Snapshot` NVML builds.

A producer, like :mod:`vgpumon.collect`: hosts that cannot run vgpumon (VMware ESXi, appliances,
locked-down hypervisors) still ship NVIDIA's own ``nvidia-smi``, whose ``-q -x`` (physical GPUs,
MIG) and ``vgpu -q -x`` (vGPU instances) reports carry most of what the NVML readers read. The
transport that fetches the reports (SSH) lives with the consumers; this package only parses text.

Values ``nvidia-smi`` prints as ``N/A``, ``[N/A]``, ``Not Supported``, ``[Insufficient
Permissions]`` and the like stay ``None``: absent, never 0.
"""

from vgpumon.smi.errors import SmiParseError
from vgpumon.smi.snapshot import SMI_COLLECTORS, ReportFailure, parse_reports

__all__ = ["SMI_COLLECTORS", "ReportFailure", "SmiParseError", "parse_reports"]
