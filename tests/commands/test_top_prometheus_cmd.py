"""``top --prometheus`` and ``usage``'s Prometheus flags: with no other source the fleet is read
from Prometheus; each mistake is one line; the client sends basic auth or a bearer token, checks
TLS against a CA file (or not, on request), narrows every query with the selector, and turns
every way a query fails into one line."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from vgpumon.cli import build_parser, main
from vgpumon.commands.top import feed_from_args
from vgpumon.config.docs_gen import FLEET_DOC_PATH, updated_fleet_doc
from vgpumon.errors import ConfigError
from vgpumon.sources.fleet import FleetFeed
from vgpumon.sources.promapi import PrometheusClient, PrometheusError, parse_selector
from vgpumon.sources.prometheus_fleet import PrometheusFleet
from vgpumon.sources.remote import Connection


def top_args(*argv: str) -> Any:
    return build_parser("top").parse_args(["top", *argv])


def test_prometheus_alone_is_the_fleet_it_scrapes() -> None:
    """Before, ``top --prometheus URL`` showed this machine's GPUs (NVML) and only filled the
    graphs from Prometheus."""
    top = feed_from_args(
        top_args("--prometheus", "http://prom:9090", "--prometheus.group-by", "cluster")
    )
    assert isinstance(top.feed, PrometheusFleet)
    assert top.feed.group_by == ("cluster",)
    assert top.feed.client.url == "http://prom:9090"
    assert not top.this_host


def test_prometheus_with_another_source_fills_the_graphs() -> None:
    top = feed_from_args(top_args("--sim", "kvm-vgpu-timesliced", "--prometheus", "http://p:9090"))
    assert isinstance(top.feed, FleetFeed)
    assert top.prometheus is not None and top.prometheus.url == "http://p:9090"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--prometheus", "prom:9090"], "give http://HOST:9090"),
        (["--prometheus", "http://u:pw@prom:9090"], "--prometheus.username"),
        (["--prometheus", "http://p:9090", "--prometheus.selector", "cluster=eu-1"], "matchers"),
        (["--prometheus", "http://p:9090", "--prometheus.selector", '{__name__="x"}'], "narrows"),
        (["--prometheus", "http://p:9090", "--prometheus.group-by", "not-a-label"], "label name"),
        (["--prometheus", "http://p:9090", "--prometheus.group-by", "instance"], "always"),
        (["--prometheus.group-by", "cluster"], "need --prometheus URL"),
        (["--prometheus.selector", '{a="b"}', "--sim", "kvm-vgpu-timesliced"], "need --prometheus"),
        (
            [
                "--sim",
                "kvm-vgpu-timesliced",
                "--prometheus",
                "http://p:9090",
                "--prometheus.group-by",
                "cluster",
            ],
            "only fills the graphs",
        ),
        (["--prometheus", "http://p:9090", "--prometheus.timeout", "soon"], "--prometheus.timeout"),
        (["--prometheus", "http://p:9090", "--libvirt.uri"], "bring their own names"),
    ],
)
def test_bad_input_is_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["top", *argv]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err, err


def test_secrets_come_from_files_and_do_not_mix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("hunter2\n")
    cases = [
        (["--prometheus.password-file", str(secret)], "--prometheus.username"),
        (
            ["--prometheus.bearer-token-file", str(secret), "--prometheus.username", "ops"],
            "not both",
        ),
        (["--prometheus.insecure", "--prometheus.ca-file", str(secret)], "does not go with"),
        (["--prometheus.password-file", str(tmp_path / "missing")], "--prometheus.password-file"),
    ]
    for extra, says in cases:
        assert main(["top", "--prometheus", "http://p:9090", *extra]) != 0
        err = capsys.readouterr().err
        assert says in err and "hunter2" not in err and err.count("\n") == 1, err


def test_usage_needs_prometheus_and_keeps_its_old_timeout_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["usage"]) != 0
    assert "give --prometheus URL" in capsys.readouterr().err
    args = build_parser("usage").parse_args(
        ["usage", "--prometheus", "http://p:9090", "--timeout", "5s"]
    )
    assert args.prometheus_timeout_seconds == "5s"
    assert "--timeout is deprecated; use --prometheus.timeout" in capsys.readouterr().err


def test_the_fleet_doc_lists_the_flags_as_the_table_says() -> None:
    committed = FLEET_DOC_PATH.read_text(encoding="utf-8")
    assert committed == updated_fleet_doc(committed), (
        "docs/fleet.md's flags table is out of date: run python -m vgpumon.config.docs_gen"
    )


@pytest.mark.parametrize(
    ("text", "matchers"),
    [
        ('{cluster="eu-1"}', ('cluster="eu-1"',)),
        ('cluster="eu-1", env=~"prod.*"', ('cluster="eu-1"', 'env=~"prod.*"')),
        ('{a!="x\\"y",b!~""}', ('a!="x\\"y"', 'b!~""')),
        ("{}", ()),
    ],
)
def test_a_selector_is_label_matchers(text: str, matchers: tuple[str, ...]) -> None:
    assert parse_selector(text) == matchers


@pytest.mark.parametrize(
    "text", ["cluster", '{cluster="eu-1"', '{a="b" c="d"}', "{a=b}", "up{a='b'}"]
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_selector(text)


def test_the_selector_narrows_every_query() -> None:
    client = PrometheusClient("http://p:9090/prometheus/", selector='{cluster="eu-1"}')
    assert client.url == "http://p:9090/prometheus"  # a Mimir prefix is kept
    assert client.select("up") == 'up{cluster="eu-1"}'
    assert client.select("up", 'instance="h"') == 'up{cluster="eu-1",instance="h"}'
    assert PrometheusClient("http://p:9090").select("up") == "up"


# --------------------------------------------------------------------------- a fake API


STATE = web.AppKey("state", dict)


async def _api(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    state["seen"].append(dict(request.headers))
    mode = state["mode"]
    if mode == "401":
        return web.Response(status=401, text="no")
    if mode == "bad_data":
        return web.json_response(
            {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
            status=400,
        )
    if mode == "html":
        return web.Response(text="<html>login</html>", content_type="text/html")
    if mode == "big":
        return web.Response(body=b"x" * 4096)
    if mode == "shape":
        return web.json_response({"status": "success", "data": {"result": "nope"}})
    body = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {"a": "b"}, "value": [1, "2"]}]},
    }
    if mode == "warn":
        body["warnings"] = ["store s2 down: partial response"]
    return web.json_response(body)


@pytest.fixture
async def api() -> AsyncIterator[tuple[web.Application, str]]:
    app = web.Application()
    app[STATE] = {"seen": [], "mode": "ok"}
    app.router.add_get("/api/v1/query", _api)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield app, f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture
async def tls_api(tmp_path: Path) -> AsyncIterator[tuple[web.Application, str, Path]]:
    """The same stand-in over HTTPS, its certificate signed by the CA in ``ca.pem``."""
    import ssl

    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    app = web.Application()
    app[STATE] = {"seen": [], "mode": "ok"}
    app.router.add_get("/api/v1/query", _api)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield app, f"https://127.0.0.1:{port}", tmp_path / "ca.pem"
    await runner.cleanup()


async def test_tls_is_checked_against_the_ca_file_or_skipped_on_request(
    tls_api: tuple[web.Application, str, Path],
) -> None:
    """--prometheus.ca-file trusts the server's CA; without it an unknown CA is one line;
    --prometheus.insecure skips the check, as for the exporters."""
    _app, url, ca_file = tls_api
    trusted = PrometheusClient(url, Connection(ca_file=str(ca_file), bearer_token="tok"))
    unknown = PrometheusClient(url, Connection(timeout_seconds=3.0))
    insecure = PrometheusClient(url, Connection(insecure=True))
    try:
        assert (await trusted.instant("up")).series == [({"a": "b"}, 2.0)]
        with pytest.raises(PrometheusError) as raised:
            await unknown.instant("up")
        assert "certificate" in str(raised.value) and "\n" not in str(raised.value)
        assert (await insecure.instant("up")).series == [({"a": "b"}, 2.0)]
    finally:
        for client in (trusted, unknown, insecure):
            await client.close()


async def test_basic_auth_or_a_bearer_token_is_sent(api: tuple[web.Application, str]) -> None:
    app, url = api
    basic = PrometheusClient(url, Connection(username="ops", password="pw"))
    bearer = PrometheusClient(url, Connection(bearer_token="tok"))
    try:
        await basic.instant("up")
        await bearer.instant("up")
    finally:
        await basic.close()
        await bearer.close()
    assert app[STATE]["seen"][0]["Authorization"] == "Basic b3BzOnB3"
    assert app[STATE]["seen"][1]["Authorization"] == "Bearer tok"


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("401", "HTTP 401: it wants credentials"),
        ("bad_data", "refused up (HTTP 400): parse error at char 3"),
        ("html", "not JSON (is this a Prometheus API?)"),
        ("big", "larger than 1000 bytes"),
        ("shape", "holds no vector"),
    ],
)
async def test_each_failure_is_one_line(
    api: tuple[web.Application, str], mode: str, says: str
) -> None:
    app, url = api
    app[STATE]["mode"] = mode
    client = PrometheusClient(url, limit_bytes=1000)
    try:
        with pytest.raises(PrometheusError) as raised:
            await client.instant("up")
    finally:
        await client.close()
    assert says in str(raised.value) and "\n" not in str(raised.value)


async def test_a_partial_answer_keeps_its_warnings(api: tuple[web.Application, str]) -> None:
    app, url = api
    app[STATE]["mode"] = "warn"
    client = PrometheusClient(url)
    try:
        answer = await client.instant("up")
    finally:
        await client.close()
    assert answer.series == [({"a": "b"}, 2.0)]
    assert answer.warnings == ("store s2 down: partial response",)


async def test_nothing_listening_is_one_line() -> None:
    client = PrometheusClient("http://127.0.0.1:9", Connection(timeout_seconds=2.0))
    try:
        with pytest.raises(PrometheusError) as raised:
            await client.instant("up")
    finally:
        await client.close()
    assert "connection refused" in str(raised.value)
