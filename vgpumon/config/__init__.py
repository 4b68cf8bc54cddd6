"""Settings of the long-running commands (``serve``, later ``top``), from flags and YAML files.

Kept apart from ``export`` so that the HTTP side receives plain values and never reaches into the
sampler's package; ``commands`` turns settings into the objects each side needs.
"""
