"""Parse an nvidia-smi XML report without trusting it.

The report comes from another machine over the network, so it is untrusted input:

* **Size cap** (:data:`MAX_REPORT_BYTES`) before any parsing: the cap stays far above a real
  report of a large host with every vGPU slot in use; anything larger is refused, not buffered.
* **No entity expansion, no external resources**: parsed with ``defusedxml`` (the maintained
  hardening of the standard library's expat parser), which refuses entity declarations ("billion
  laughs", quadratic blow-up) and external entity or DTD references.
* **Bytes XML cannot hold are replaced, not fatal**: a process name is whatever its owner
  chose, and nvidia-smi writes it as it is; one byte that is not UTF-8, or a control character
  XML 1.0 forbids (ESC, for one), made the whole report unreadable and blanked the host. A
  report the parser refuses for that is read again with each such byte or character as U+FFFD
  (:func:`_xml_safe`), so only that name shows the replacement.
* **The DOCTYPE line itself is allowed**: every real report starts with
  ``<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_vNN.dtd">``. Expat never fetches that DTD; only
  *declarations* inside a DOCTYPE could do harm, and those are what defusedxml forbids. Forbidding
  every DTD would reject every report nvidia-smi writes.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from vgpumon.smi.errors import SmiParseError

MAX_REPORT_BYTES = 16 * 1024 * 1024
ROOT = "nvidia_smi_log"
# What XML 1.0 cannot hold (its Char production): C0 controls but tab, newline and carriage
# return; surrogates (bytes that were not UTF-8, after decoding with surrogateescape); U+FFFE/F.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _parse(raw: bytes) -> ET.Element:
    return fromstring(raw, forbid_dtd=False, forbid_entities=True, forbid_external=True)


def _xml_safe(raw: bytes) -> bytes:
    """``raw`` (nvidia-smi writes UTF-8) with bytes that are not UTF-8 and characters XML cannot
    hold replaced by U+FFFD."""
    text = raw.decode("utf-8", errors="replace")
    return _NOT_XML.sub("\ufffd", text).encode("utf-8")


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
        root = _parse(raw)
    except DefusedXmlException as err:
        raise SmiParseError(f"{what} refused: {type(err).__name__}") from None
    except ET.ParseError as err:
        safe = _xml_safe(raw)
        if safe == raw:
            raise SmiParseError(f"{what} is not XML: {err}") from None
        try:
            root = _parse(safe)
        except DefusedXmlException as again:
            raise SmiParseError(f"{what} refused: {type(again).__name__}") from None
        except ET.ParseError:
            raise SmiParseError(f"{what} is not XML: {err}") from None
    if root.tag != ROOT:
        raise SmiParseError(f"{what} is a <{root.tag}> document, not <{ROOT}>")
    return root
