"""User-facing failures.

Anything raised as :class:`VgpumonError` is printed by the CLI as one line and turns into a non-zero
exit status; everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class VgpumonError(Exception):
    """A failure the user can act on; ``str(err)`` is the whole message."""

    exit_code = 2


class ConfigError(VgpumonError):
    """A bad flag, config file, scenario file or web-config file."""
