"""Presentation shared by every front end, free of any UI toolkit.

:mod:`~vgpumon.view.format` prints values (absent as ``—``), :mod:`~vgpumon.view.rows` builds row
models from a snapshot, :mod:`~vgpumon.view.columns` defines the tables over them,
:mod:`~vgpumon.view.filter` parses the filter grammar and :mod:`~vgpumon.view.events` derives the
event log from two snapshots. :mod:`~vgpumon.view.render` draws ``vgpumon snapshot`` with rich;
textual is never imported here.
"""
