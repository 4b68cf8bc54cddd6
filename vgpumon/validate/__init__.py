"""``vgpumon validate``: run load whose effect is known and check what vgpumon reads.

The package is layered one way, each module importing only those above it:

* :mod:`~vgpumon.validate.readings`: the values compared, taken out of a Snapshot, and the target;
* :mod:`~vgpumon.validate.steps`: the ladder of loads and the checks of one step;
* :mod:`~vgpumon.validate.drivers`: who applies a load (CUDA workers, or the simulator);
* :mod:`~vgpumon.validate.sources`: where readings come from (readers here, or an exporter);
* :mod:`~vgpumon.validate.run`: the run itself (settle, measure, check, report);
* :mod:`~vgpumon.validate.report`: the report as JSON and a summary line;
* :mod:`~vgpumon.validate.display`: the live display and the final table (rich).

Load generation itself is :mod:`vgpumon.loadgen`; validate uses it, never the other way round.
"""
