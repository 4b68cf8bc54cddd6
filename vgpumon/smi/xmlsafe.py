"""Parse an nvidia-smi XML report without trusting it.

The report comes from another machine over the network, so it is untrusted input:

* **Size cap** (:data:`MAX_REPORT_BYTES`) before any parsing: the cap stays far above a real
  report of a large host with every vGPU slot in use; anything larger is refused, not buffered.
* **No entity expansion, no external resources**: parsed with ``defusedxml`` (the maintained
  hardening of the standard library's expat parser), which refuses entity declarations ("billion
  laughs", quadratic blow-up) and external entity or DTD references.
* **The DOCTYPE line itself is allowed**: every real report starts with
  ``<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_vNN.dtd">``. Expat never fetches that DTD; only
  *declarations* inside a DOCTYPE could do harm, and those are what defusedxml forbids. Forbidding
  every DTD would reject every report nvidia-smi writes.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from vgpumon.smi.errors import SmiParseError

MAX_REPORT_BYTES = 16 * 1024 * 1024
ROOT = "nvidia_smi_log"


def parse_report(data: bytes | str, *, what: str = "nvidia-smi report") -> ET.Element:
    """The ``<nvidia_smi_log>`` root element of ``data``, or :class:`SmiParseError`."""
    raw = data.encode() if isinstance(data, str) else data
    if len(raw) > MAX_REPORT_BYTES:
        raise SmiParseError(
            f"{what} is {len(raw)} bytes, more than the {MAX_REPORT_BYTES} allowed", "too_large"
        )
    if not raw.strip():
        raise SmiParseError(f"{what} is empty", "empty")
    try:
        root = fromstring(raw, forbid_dtd=False, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as err:
        raise SmiParseError(f"{what} refused: {type(err).__name__}") from None
    except ET.ParseError as err:
        raise SmiParseError(f"{what} is not XML: {err}") from None
    if root.tag != ROOT:
        raise SmiParseError(f"{what} is a <{root.tag}> document, not <{ROOT}>")
    return root
