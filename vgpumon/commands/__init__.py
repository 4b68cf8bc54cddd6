"""One module per subcommand; see :mod:`vgpumon.cli`."""
