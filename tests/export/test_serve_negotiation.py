"""Content negotiation: prometheus-client's answers, but q=0 and unknown versions respected."""

from __future__ import annotations

import pytest
from prometheus_client.exposition import choose_encoder, gzip_accepted

from vgpumon.export.negotiation import (
    CONTENT_TYPE_OPENMETRICS,
    CONTENT_TYPE_TEXT_0_0_4,
    choose,
    gzip_wanted,
)

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
PROMETHEUS_3_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
    "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
AGREED = (
    "",
    PROMETHEUS_ACCEPT,
    "application/openmetrics-text",
    "application/openmetrics-text; version=1.0.0",
    "application/openmetrics-text;version=1.0.0;escaping=underscores",
    "application/openmetrics-text;version=0.0.1",
    "text/plain;version=0.0.4",
    "text/plain;version=1.0.0;escaping=allow-utf-8",
    "text/html,*/*",
    "*/*",
)


@pytest.mark.parametrize("accept", AGREED)
def test_same_answer_as_prometheus_client(accept: str) -> None:
    _encoder, content_type = choose_encoder(accept)
    choice = choose(accept)
    assert choice.content_type == content_type
    assert choice.openmetrics == ("openmetrics" in content_type)


def test_prometheus_3_gets_openmetrics() -> None:
    choice = choose(PROMETHEUS_3_ACCEPT)
    assert choice.openmetrics
    assert choice.content_type == CONTENT_TYPE_OPENMETRICS + "; escaping=allow-utf-8"


@pytest.mark.parametrize("version", ["99.0.0", "2.0.0", "1.1", "bogus"])
def test_an_unknown_openmetrics_version_is_never_echoed(version: str) -> None:
    accept = f"application/openmetrics-text; version={version}"
    choice = choose(accept)
    assert f"version={version}" not in choice.content_type
    assert choice == choose("")  # nothing else acceptable: the text format
    fallback = choose(f"{accept},application/openmetrics-text;version=1.0.0;q=0.5")
    assert fallback.openmetrics and "version=1.0.0" in fallback.content_type


def test_q_zero_refuses_a_format() -> None:
    assert not choose("application/openmetrics-text;q=0").openmetrics
    assert not choose("application/openmetrics-text;q=0.0, text/plain").openmetrics
    assert choose("text/plain;version=0.0.4;q=0.2,application/openmetrics-text;q=0.9").openmetrics
    assert choose("application/openmetrics-text;q=0").content_type == CONTENT_TYPE_TEXT_0_0_4


@pytest.mark.parametrize(
    ("header", "wanted"),
    [
        ("gzip", True),
        ("deflate, gzip;q=0.9", True),
        ("GZIP", True),
        ("gzip;q=0", False),
        ("gzip; q=0.000", False),
        ("identity", False),
        ("", False),
        ("br, gzip;q=0, deflate", False),
    ],
)
def test_gzip_respects_q_zero(header: str, wanted: bool) -> None:
    assert gzip_wanted(header) is wanted
    if "q=0" not in header.replace(" ", ""):
        assert gzip_accepted(header) is wanted, "same answer as prometheus-client"
