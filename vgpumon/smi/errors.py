"""The one error the parser raises: the report is not an nvidia-smi XML report vgpumon can read."""

from __future__ import annotations

from vgpumon.errors import VgpumonError


class SmiParseError(VgpumonError):
    """Too large, not XML, an XML attack (entities), or not an ``<nvidia_smi_log>``; ``failure``
    says which, in the words of ``vgpumon.model.COLLECTOR_FAILURES``."""

    def __init__(self, message: str, failure: str = "unparsable") -> None:
        super().__init__(message)
        self.failure = failure
