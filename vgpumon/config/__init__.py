"""Settings of the long-running commands (``serve``, later ``top``), from flags and YAML files.

Every ``serve`` setting is a row of :mod:`vgpumon.config.table`. Kept apart from ``export`` so that
the HTTP side receives plain values: config reads the HTTP side's value types
(``vgpumon.export.address``, ``vgpumon.export.limits``), export never imports config (the import
rules test); ``commands`` turns settings into the objects each side needs.
"""
