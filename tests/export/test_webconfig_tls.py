"""TLS of the web config against real clients: versions, client certificates, SANs, rotation.

Certificates come from trustme at test time; the server is a tiny aiohttp app on 127.0.0.1:0 with
the runtime plugged in, and clients are aiohttp and the standard library's http.client / ssl.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import os
import ssl
import textwrap
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import trustme

from vgpumon.export.address import ListenAddress
from vgpumon.export.app import App, Request, Response, text
from vgpumon.export.listener import Listener
from vgpumon.export.webconfig_runtime import WebConfigRuntime

# Handshake failures surface as SSLError, or as a reset/EOF when the server aborts first.
HANDSHAKE_FAILED = (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)


@dataclass
class Pki:
    ca: trustme.CA
    other_ca: trustme.CA
    server: trustme.LeafCert
    server2: trustme.LeafCert
    client: trustme.LeafCert
    client_other_ca: trustme.LeafCert
    client_other_san: trustme.LeafCert
    client_ca2: trustme.LeafCert
    ca2: trustme.CA


@pytest.fixture(scope="module")
def pki() -> Pki:
    ca, other, ca2 = trustme.CA(), trustme.CA(), trustme.CA()
    return Pki(
        ca=ca,
        other_ca=other,
        server=ca.issue_cert("127.0.0.1", "localhost", common_name="server-one"),
        server2=ca.issue_cert("127.0.0.1", "localhost", common_name="server-two"),
        client=ca.issue_cert("client.example", common_name="client"),
        client_other_ca=other.issue_cert("client.example", common_name="intruder"),
        client_other_san=ca.issue_cert("someone-else.example", common_name="other-san"),
        client_ca2=ca2.issue_cert("client.example", common_name="client-of-ca2"),
        ca2=ca2,
    )


def replace(path: Path, data: bytes) -> None:
    """Atomic replace, as certificate tools (cert-manager, certbot, kubelet) do."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def install(tmp: Path, leaf: trustme.LeafCert, ca: trustme.CA | None = None) -> None:
    replace(tmp / "server.crt", leaf.cert_chain_pems[0].bytes())
    replace(tmp / "server.key", leaf.private_key_pem.bytes())
    if ca is not None:
        replace(tmp / "ca.crt", ca.cert_pem.bytes())


def web_config(tmp: Path, extra: str = "") -> str:
    path = tmp / "web.yml"
    text = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
    path.write_text(text + textwrap.indent(textwrap.dedent(extra).lstrip("\n"), "  "))
    return str(path)


def der(leaf: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())


def client_context(
    pki: Pki, cert: trustme.LeafCert | None = None, max_version: ssl.TLSVersion | None = None
) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    pki.ca.configure_trust(ctx)
    if cert is not None:
        cert.configure_cert(ctx)
    if max_version is not None:
        ctx.maximum_version = max_version
    return ctx


@dataclass
class Server:
    port: int
    calls: list[str]


@asynccontextmanager
async def serve(runtime: WebConfigRuntime) -> AsyncIterator[Server]:
    calls: list[str] = []

    async def ok(request: Request) -> Response:
        calls.append(request.path)
        return text("ok")

    app = App()
    app.add_get("/", ok)
    runtime.setup(app)
    listener = Listener(app)
    await listener.start([ListenAddress("127.0.0.1", 0)], runtime.ssl_context())
    try:
        yield Server(port=listener.addresses[0][1], calls=calls)
    finally:
        await listener.close(1.0)


@dataclass
class Reply:
    status: int
    peer_der: bytes
    version: str
    cipher: str
    alpn: str | None


def _get(port: int, ctx: ssl.SSLContext) -> Reply:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.connect()
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        peer = sock.getpeercert(binary_form=True)
        version, cipher = sock.version(), sock.cipher()
        alpn = sock.selected_alpn_protocol()
        conn.request("GET", "/")
        response = conn.getresponse()
        response.read()
        assert peer is not None and version is not None and cipher is not None
        return Reply(response.status, peer, version, cipher[0], alpn)
    finally:
        conn.close()


async def get(server: Server, ctx: ssl.SSLContext) -> Reply:
    """One request on a new connection with a blocking client (run off the server's loop)."""
    return await asyncio.to_thread(_get, server.port, ctx)


# -- basic TLS ----------------------------------------------------------------------------------


async def test_tls_with_aiohttp_and_http_client(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server)
    runtime = WebConfigRuntime(web_config(tmp_path))
    async with serve(runtime) as server:
        reply = await get(server, client_context(pki))
        assert reply.status == 200 and reply.peer_der == der(pki.server)
        assert reply.version == "TLSv1.3"
        async with aiohttp.ClientSession() as client:
            url = f"https://127.0.0.1:{server.port}/"
            async with client.get(url, ssl=client_context(pki)) as resp:
                assert resp.status == 200 and await resp.text() == "ok"
        # A client that does not trust the CA is refused by its own verification.
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.to_thread(_get, server.port, ssl.create_default_context())


async def test_min_version_tls13_refuses_a_tls12_only_client(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server)
    runtime = WebConfigRuntime(web_config(tmp_path, "min_version: TLS13\n"))
    async with serve(runtime) as server:
        # asyncio closes a failed handshake without flushing OpenSSL's alert: the client sees EOF.
        with pytest.raises(ssl.SSLError):
            await get(server, client_context(pki, max_version=ssl.TLSVersion.TLSv1_2))
        assert (await get(server, client_context(pki))).version == "TLSv1.3"
        assert server.calls == ["/"]


async def test_max_version_and_cipher_suites_apply(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server)
    extra = """
    max_version: TLS12
    cipher_suites:
      - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
      - TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
    """
    runtime = WebConfigRuntime(web_config(tmp_path, extra))
    async with serve(runtime) as server:
        reply = await get(server, client_context(pki))
        assert reply.version == "TLSv1.2"
        # The client prefers AES-256; the server's order (prefer_server_cipher_suites) wins.
        assert reply.cipher == "ECDHE-ECDSA-AES128-GCM-SHA256"
        only_aes256 = client_context(pki)
        only_aes256.set_ciphers("ECDHE-ECDSA-AES256-GCM-SHA384")
        with pytest.raises(ssl.SSLError):
            await get(server, only_aes256)


async def test_tls10_is_possible_when_asked_for(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server)
    runtime = WebConfigRuntime(web_config(tmp_path, "min_version: TLS10\nmax_version: TLS10\n"))
    ctx = client_context(pki)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = ssl.TLSVersion.TLSv1
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    async with serve(runtime) as server:
        assert (await get(server, ctx)).version == "TLSv1"
        with pytest.raises(ssl.SSLError):
            await get(server, client_context(pki))  # a modern client refuses TLS 1.0


async def test_curve_preferences_restrict_key_exchange(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server)
    runtime = WebConfigRuntime(web_config(tmp_path, "curve_preferences: [CurveP384]\n"))
    async with serve(runtime) as server:
        assert (await get(server, client_context(pki))).status == 200
        p256_only = client_context(pki)
        p256_only.set_ecdh_curve("prime256v1")
        with pytest.raises(ssl.SSLError):
            await get(server, p256_only)
        p384_only = client_context(pki)
        p384_only.set_ecdh_curve("secp384r1")
        assert (await get(server, p384_only)).status == 200


async def test_alpn_is_http11_even_with_http2_true(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server)
    runtime = WebConfigRuntime(web_config(tmp_path))  # http2 defaults to true
    async with serve(runtime) as server:
        ctx = client_context(pki)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        assert (await get(server, ctx)).alpn == "http/1.1"


async def test_inline_cert_key_and_client_ca(tmp_path: Path, pki: Pki) -> None:
    def block(pem: bytes) -> str:
        return textwrap.indent(pem.decode(), "    ")

    path = tmp_path / "web.yml"
    path.write_text(
        "tls_server_config:\n"
        f"  cert: |\n{block(pki.server.cert_chain_pems[0].bytes())}"
        f"  key: |\n{block(pki.server.private_key_pem.bytes())}"
        f"  client_ca: |\n{block(pki.ca.cert_pem.bytes())}"
        "  client_auth_type: RequireAndVerifyClientCert\n"
    )
    runtime = WebConfigRuntime(str(path))
    async with serve(runtime) as server:
        reply = await get(server, client_context(pki, pki.client))
        assert reply.status == 200 and reply.peer_der == der(pki.server)
        with pytest.raises(HANDSHAKE_FAILED):
            await get(server, client_context(pki))


# -- client certificates ------------------------------------------------------------------------

VERIFY = """
client_auth_type: RequireAndVerifyClientCert
client_ca_file: ca.crt
"""


@pytest.mark.parametrize("client_tls", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
async def test_require_and_verify_client_cert(
    tmp_path: Path, pki: Pki, client_tls: ssl.TLSVersion
) -> None:
    install(tmp_path, pki.server, pki.ca)
    runtime = WebConfigRuntime(web_config(tmp_path, VERIFY))
    async with serve(runtime) as server:
        assert (await get(server, client_context(pki, pki.client, client_tls))).status == 200
        with pytest.raises(HANDSHAKE_FAILED):
            await get(server, client_context(pki, None, client_tls))
        with pytest.raises(HANDSHAKE_FAILED):
            await get(server, client_context(pki, pki.client_other_ca, client_tls))
        if client_tls == ssl.TLSVersion.TLSv1_2:
            # With TLS 1.2 the refusal is part of the handshake itself.
            sock_ctx = client_context(pki, None, client_tls)
            with pytest.raises(ssl.SSLError):
                await asyncio.to_thread(_handshake_only, server.port, sock_ctx)
        assert server.calls == ["/"]


def _handshake_only(port: int, ctx: ssl.SSLContext) -> None:
    import socket

    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        pass


async def test_verify_client_cert_if_given(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server, pki.ca)
    extra = "client_auth_type: VerifyClientCertIfGiven\nclient_ca_file: ca.crt\n"
    runtime = WebConfigRuntime(web_config(tmp_path, extra))
    async with serve(runtime) as server:
        assert (await get(server, client_context(pki))).status == 200
        assert (await get(server, client_context(pki, pki.client))).status == 200
        with pytest.raises(HANDSHAKE_FAILED):
            await get(server, client_context(pki, pki.client_other_ca))


async def test_request_client_cert_behaves_as_no_client_cert(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server)
    runtime = WebConfigRuntime(web_config(tmp_path, "client_auth_type: RequestClientCert\n"))
    async with serve(runtime) as server:
        assert (await get(server, client_context(pki))).status == 200
        assert (await get(server, client_context(pki, pki.client_other_ca))).status == 200


async def test_client_allowed_sans(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server, pki.ca)
    runtime = WebConfigRuntime(
        web_config(tmp_path, VERIFY + "client_allowed_sans: [client.example]\n")
    )
    async with serve(runtime) as server:
        assert (await get(server, client_context(pki, pki.client))).status == 200
        assert (await get(server, client_context(pki, pki.client_other_san))).status == 403
        assert server.calls == ["/"]


# -- reloading ----------------------------------------------------------------------------------


async def test_rotated_certificate_applies_to_new_connections(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server)
    runtime = WebConfigRuntime(web_config(tmp_path), check_interval=0)
    context = runtime.ssl_context()
    async with serve(runtime) as server:
        assert (await get(server, client_context(pki))).peer_der == der(pki.server)
        install(tmp_path, pki.server2)
        assert (await get(server, client_context(pki))).peer_der == der(pki.server2)
    assert runtime.ssl_context() is context  # the listener's context never changes


async def test_rotation_is_checked_at_most_once_per_interval(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server)
    runtime = WebConfigRuntime(web_config(tmp_path), check_interval=3600)
    async with serve(runtime) as server:
        install(tmp_path, pki.server2)
        assert (await get(server, client_context(pki))).peer_der == der(pki.server)
        assert runtime.check_for_changes(force=True)
        assert (await get(server, client_context(pki))).peer_der == der(pki.server2)


async def test_half_rotated_pair_keeps_the_old_certificate(
    tmp_path: Path, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="vgpumon.export.webconfig")
    install(tmp_path, pki.server)
    runtime = WebConfigRuntime(web_config(tmp_path), check_interval=0)
    async with serve(runtime) as server:
        replace(tmp_path / "server.crt", pki.server2.cert_chain_pems[0].bytes())  # key not yet
        assert (await get(server, client_context(pki))).peer_der == der(pki.server)
        assert "does not match" in caplog.text and "keeping the previous web config" in caplog.text
        replace(tmp_path / "server.key", pki.server2.private_key_pem.bytes())
        assert (await get(server, client_context(pki))).peer_der == der(pki.server2)


async def test_in_place_rewrite_is_noticed(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server)
    runtime = WebConfigRuntime(web_config(tmp_path), check_interval=0)
    async with serve(runtime) as server:
        assert (await get(server, client_context(pki))).peer_der == der(pki.server)
        (tmp_path / "server.key").write_bytes(pki.server2.private_key_pem.bytes())
        (tmp_path / "server.crt").write_bytes(pki.server2.cert_chain_pems[0].bytes())
        assert (await get(server, client_context(pki))).peer_der == der(pki.server2)


async def test_rotated_client_ca_applies(tmp_path: Path, pki: Pki) -> None:
    install(tmp_path, pki.server, pki.ca)
    runtime = WebConfigRuntime(web_config(tmp_path, VERIFY), check_interval=0)
    async with serve(runtime) as server:
        assert (await get(server, client_context(pki, pki.client))).status == 200
        replace(tmp_path / "ca.crt", pki.ca2.cert_pem.bytes())
        with pytest.raises(HANDSHAKE_FAILED):
            await get(server, client_context(pki, pki.client))
        assert (await get(server, client_context(pki, pki.client_ca2))).status == 200


async def test_tightened_client_auth_applies_without_restart(tmp_path: Path, pki: Pki) -> None:
    """Verify mode is copied into each connection at creation; the reload must still reach it."""
    install(tmp_path, pki.server, pki.ca)
    path = web_config(tmp_path)
    runtime = WebConfigRuntime(path, check_interval=0)
    async with serve(runtime) as server:
        assert (await get(server, client_context(pki))).status == 200
        web_config(tmp_path, VERIFY)
        with pytest.raises(HANDSHAKE_FAILED):
            await get(server, client_context(pki))
        assert (await get(server, client_context(pki, pki.client))).status == 200


async def test_switching_tls_off_is_refused(
    tmp_path: Path, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="vgpumon.export.webconfig")
    install(tmp_path, pki.server)
    path = web_config(tmp_path)
    runtime = WebConfigRuntime(path, check_interval=0)
    async with serve(runtime) as server:
        Path(path).write_text("basic_auth_users: {}\n")
        assert (await get(server, client_context(pki))).status == 200
        assert "switching TLS off needs a restart" in caplog.text


def test_sni_callback_swaps_in_the_reloaded_certificate(tmp_path: Path, pki: Pki) -> None:
    """A connection wrapped before a rotation but greeted after it gets the new certificate.

    Driven through memory BIOs so the rotation lands exactly between wrap and ClientHello.
    """
    install(tmp_path, pki.server)
    runtime = WebConfigRuntime(web_config(tmp_path), check_interval=3600)
    outer = runtime.ssl_context()
    assert outer is not None
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    server_obj = outer.wrap_bio(s_in, s_out, server_side=True)
    assert server_obj.context is runtime.config.tls_context
    install(tmp_path, pki.server2)
    runtime._next_check = 0.0  # let the ClientHello be the moment the change is noticed
    client_obj = client_context(pki).wrap_bio(c_in, c_out, server_hostname="127.0.0.1")
    for _ in range(10):
        done = 0
        for obj, out, peer_in in ((client_obj, c_out, s_in), (server_obj, s_out, c_in)):
            try:
                obj.do_handshake()
                done += 1
            except ssl.SSLWantReadError:
                pass
            peer_in.write(out.read())
        if done == 2:
            break
    assert client_obj.getpeercert(binary_form=True) == der(pki.server2)
    assert server_obj.context is runtime.config.tls_context


async def test_a_fifo_renamed_over_the_key_does_not_hang_requests(
    tmp_path: Path, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """The reload used to open the FIFO on the event loop and block every request forever."""
    caplog.set_level(logging.WARNING, logger="vgpumon.export.webconfig")
    install(tmp_path, pki.server)
    runtime = WebConfigRuntime(web_config(tmp_path), check_interval=0)
    async with serve(runtime) as server:
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        os.replace(fifo, tmp_path / "server.key")
        reply = await asyncio.wait_for(get(server, client_context(pki)), 10)
        assert reply.status == 200 and reply.peer_der == der(pki.server), "the old key serves"
        assert "not a regular file" in caplog.text
        assert "keeping the previous web config" in caplog.text
