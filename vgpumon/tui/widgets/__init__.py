"""Widgets of ``vgpumon top``: keyed tables, fixed-axis graphs, the filter bar."""
