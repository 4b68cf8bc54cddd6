"""web-config.yml parsing and validation, basic auth, security headers and reloads (plain HTTP).

TLS handshakes live in test_webconfig_tls.py. Servers listen on 127.0.0.1:0 only.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import textwrap
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import bcrypt
import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from vgpumon.errors import ConfigError
from vgpumon.export.address import ListenAddress
from vgpumon.export.app import App, Handler, Request, Response, text
from vgpumon.export.auth import (
    AuthRefused,
    BasicAuth,
    FailureLimiter,
    bcrypt_hash_error,
    parse_basic_authorization,
)
from vgpumon.export.connections import CHUNK_BYTES
from vgpumon.export.listener import Listener
from vgpumon.export.webconfig import WebConfig, _parse_go_duration
from vgpumon.export.webconfig_runtime import WebConfigRuntime

ALICE_PW = "alice-secret"
HASH_ALICE = bcrypt.hashpw(ALICE_PW.encode(), bcrypt.gensalt(4)).decode()
HASH_OTHER = bcrypt.hashpw(b"something-else", bcrypt.gensalt(4)).decode()
LONG_PW = "p" * 72 + "-the-part-bcrypt-never-reads"
HASH_LONG = bcrypt.hashpw(LONG_PW.encode()[:72], bcrypt.gensalt(4)).decode()


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with a server cert/key, a key for another cert, a CA and odd files."""
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    other = ca.issue_cert("other.example")
    leaf.cert_chain_pems[0].write_to_path(str(d / "server.crt"))
    leaf.private_key_pem.write_to_path(str(d / "server.key"))
    other.private_key_pem.write_to_path(str(d / "other.key"))
    ca.cert_pem.write_to_path(str(d / "ca.crt"))
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    (d / "encrypted.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"hunter2"),
        )
    )
    (d / "garbage.pem").write_text("this is not PEM\n")
    for private in d.glob("*.key"):
        private.chmod(0o600)  # as keys are kept: a world-readable one is warned of
    return d


def write(directory: Path, text: str, name: str = "web.yml") -> str:
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return str(path)


# -- validation table ---------------------------------------------------------------------------

BAD = [
    # (id, file text, expected message fragment, expected line or None)
    ("unknown-top-key", "foo: 1\n", 'unknown key "foo" in the web config', 1),
    (
        "unknown-tls-key",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          certfile: {pki}/server.crt
        """,
        'unknown key "certfile" in tls_server_config',
        3,
    ),
    (
        "unknown-http-key",
        "http_server_config:\n  http3: true\n",
        'unknown key "http3" in http_server_config',
        2,
    ),
    (
        "unknown-rate-key",
        "rate_limit:\n  every: 1s\n",
        'unknown key "every" in rate_limit',
        2,
    ),
    (
        "duplicate-key",
        "basic_auth_users:\n  a: {hash}\n  a: {hash}\n",
        'duplicate key "a" in basic_auth_users',
        3,
    ),
    ("invalid-yaml", "tls_server_config: [\n", "invalid YAML", None),
    ("not-a-mapping", "- a\n- b\n", "the web config must be a mapping", 1),
    (
        "bad-client-auth-type",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          client_auth_type: Sometimes
        """,
        'invalid client_auth_type "Sometimes"',
        4,
    ),
    (
        "require-any-client-cert",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          client_auth_type: RequireAnyClientCert
        """,
        "RequireAnyClientCert (accept any client certificate without verifying it) cannot",
        4,
    ),
    (
        "missing-cert-file",
        """
        tls_server_config:
          cert_file: {pki}/nope.crt
          key_file: {pki}/server.key
        """,
        "cannot read cert_file {pki}/nope.crt: No such file or directory",
        2,
    ),
    (
        "missing-key",
        "tls_server_config:\n  cert_file: {pki}/server.crt\n",
        "missing one of key or key_file",
        1,
    ),
    (
        "missing-cert",
        "tls_server_config:\n  key_file: {pki}/server.key\n",
        "missing one of cert or cert_file",
        1,
    ),
    (
        "cert-and-cert-file",
        """
        tls_server_config:
          cert: "-----BEGIN CERTIFICATE-----"
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
        """,
        "set only one of cert and cert_file",
        2,
    ),
    (
        "cert-not-pem",
        """
        tls_server_config:
          cert_file: {pki}/garbage.pem
          key_file: {pki}/server.key
        """,
        "cert_file {pki}/garbage.pem contains no PEM certificate",
        2,
    ),
    (
        "key-not-pem",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/garbage.pem
        """,
        "key_file {pki}/garbage.pem contains no PEM private key",
        3,
    ),
    (
        "mismatched-key",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/other.key
        """,
        "key_file {pki}/other.key does not match cert_file {pki}/server.crt",
        3,
    ),
    (
        "encrypted-key",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/encrypted.key
        """,
        "key_file {pki}/encrypted.key is encrypted",
        3,
    ),
    (
        "verify-without-ca",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          client_auth_type: RequireAndVerifyClientCert
        """,
        "client_auth_type RequireAndVerifyClientCert needs client_ca_file",
        4,
    ),
    (
        "verify-if-given-without-ca",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          client_auth_type: VerifyClientCertIfGiven
        """,
        "client_auth_type VerifyClientCertIfGiven needs client_ca_file",
        4,
    ),
    (
        "ca-without-client-auth",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          client_ca_file: {pki}/ca.crt
        """,
        "client CA's have been configured without a Client Auth Policy",
        4,
    ),
    (
        "ca-file-not-pem",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          client_auth_type: RequireAndVerifyClientCert
          client_ca_file: {pki}/garbage.pem
        """,
        "client_ca_file {pki}/garbage.pem contains no PEM certificate",
        5,
    ),
    (
        "sans-without-required-cert",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          client_auth_type: VerifyClientCertIfGiven
          client_ca_file: {pki}/ca.crt
          client_allowed_sans: [client.example]
        """,
        "client_allowed_sans requires client_auth_type RequireAndVerifyClientCert",
        6,
    ),
    (
        "min-above-max",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          min_version: TLS13
          max_version: TLS12
        """,
        "min_version TLS13 is above max_version TLS12",
        4,
    ),
    (
        "unknown-tls-version",
        "tls_server_config:\n  max_version: TLS14\n",
        "unknown TLS version: TLS14",
        2,
    ),
    (
        "unknown-cipher",
        "tls_server_config:\n  cipher_suites: [TLS_FANCY_CIPHER]\n",
        "unknown cipher: TLS_FANCY_CIPHER",
        2,
    ),
    (
        "insecure-cipher",
        "tls_server_config:\n  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n",
        "unknown cipher: TLS_RSA_WITH_RC4_128_SHA (Go lists it as insecure)",
        2,
    ),
    (
        "only-tls13-ciphers",
        """
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          cipher_suites: [TLS_AES_128_GCM_SHA256]
        """,
        "cipher_suites lists only TLS 1.3 suites",
        4,
    ),
    (
        "unknown-curve",
        "tls_server_config:\n  curve_preferences: [CurveP224]\n",
        "unknown curve: CurveP224",
        2,
    ),
    (
        "bad-bcrypt-hash",
        "basic_auth_users:\n  alice: plaintext-password\n",
        "basic_auth_users.alice: the password hash is not a bcrypt hash",
        2,
    ),
    (
        "bcrypt-cost-too-low",
        "basic_auth_users:\n  alice: $2b$03$" + "a" * 53 + "\n",
        "has bcrypt cost 3, outside 4..31",
        2,
    ),
    (
        "user-with-colon",
        "basic_auth_users:\n  'a:b': {hash}\n",
        'user name "a:b" contains ":"',
        2,
    ),
    (
        "users-not-a-mapping",
        "basic_auth_users:\n  - alice\n",
        "basic_auth_users must be a mapping",
        2,
    ),
    (
        "header-not-allowed",
        "http_server_config:\n  headers:\n    X-Powered-By: vgpumon\n",
        'HTTP header "X-Powered-By" can not be configured',
        3,
    ),
    (
        "header-name-case",
        "http_server_config:\n  headers:\n    x-frame-options: deny\n",
        'HTTP header "x-frame-options" can not be configured',
        3,
    ),
    (
        "header-bad-frame-options",
        "http_server_config:\n  headers:\n    X-Frame-Options: DENY\n",
        'invalid value for X-Frame-Options. Expected one of: ["deny" "sameorigin"],'
        ' but got: "DENY"',
        3,
    ),
    (
        "header-bad-content-type-options",
        "http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n",
        'Expected one of: ["nosniff"], but got: "sniff"',
        3,
    ),
    (
        "header-control-character",
        'http_server_config:\n  headers:\n    Content-Security-Policy: "a\\r\\nSet-Cookie: x"\n',
        "headers.Content-Security-Policy contains a control character",
        3,
    ),
    (
        "http2-not-bool",
        "http_server_config:\n  http2: maybe\n",
        "http_server_config.http2 must be true or false",
        2,
    ),
    (
        "rate-limit-zero-burst",
        "rate_limit:\n  interval: 1s\n  burst: 0\n",
        "rate_limit.burst must be at least 1",
        3,  # the burst line (it used to name the interval line)
    ),
    (
        "rate-limit-bad-duration",
        "rate_limit:\n  interval: fast\n  burst: 1\n",
        'rate_limit.interval: invalid duration "fast"',
        2,
    ),
]


@pytest.mark.parametrize(
    ("text", "expected", "line"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_web_config_fails_with_one_line_message(
    tmp_path: Path, pki: Path, text: str, expected: str, line: int | None
) -> None:
    path = write(tmp_path, text.format(pki=pki, hash=HASH_ALICE))
    with pytest.raises(ConfigError) as err:
        WebConfig.load(path)
    message = str(err.value)
    assert expected.format(pki=pki) in message
    assert "\n" not in message
    assert message.startswith(f"web config {path}")
    if line is not None:
        assert f"{path} line {line}: " in message


def test_missing_web_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read web config .*absent\.yml: No such file"):
        WebConfig.load(str(tmp_path / "absent.yml"))


def test_runtime_refuses_a_bad_file_at_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match='unknown key "basic_auth"'):
        WebConfigRuntime(write(tmp_path, "basic_auth: {}\n"))


def test_empty_file_means_plain_http_without_auth(tmp_path: Path) -> None:
    config = WebConfig.load(write(tmp_path, ""))
    assert config.tls is None and config.tls_context is None
    assert config.users == {}
    assert config.http.http2 is True and config.http.headers == ()
    assert config.rate_limit is None


def test_full_tls_config_with_relative_paths(tmp_path: Path, pki: Path) -> None:
    for name in ("server.crt", "server.key", "ca.crt"):
        (tmp_path / name).write_bytes((pki / name).read_bytes())
    (tmp_path / "server.key").chmod(0o600)
    config = WebConfig.load(
        write(
            tmp_path,
            """
            tls_server_config:
              cert_file: server.crt
              key_file: server.key
              client_auth_type: RequireAndVerifyClientCert
              client_ca_file: ca.crt
              client_allowed_sans: [client.example, 10.0.0.1]
              min_version: TLS12
              max_version: TLS13
              cipher_suites:
                - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                - TLS_AES_128_GCM_SHA256
              prefer_server_cipher_suites: false
              curve_preferences: [X25519]
            http_server_config:
              http2: false
              headers:
                Strict-Transport-Security: max-age=31536000
                X-Content-Type-Options: nosniff
                X-Frame-Options: sameorigin
                X-XSS-Protection: 1; mode=block
                Content-Security-Policy: ""
            basic_auth_users:
              alice: {hash}
            rate_limit:
              interval: 1m30s
              burst: 5
            """.replace("{hash}", HASH_ALICE),
        )
    )
    tls = config.tls
    assert tls is not None
    assert tls.cert_file == str(tmp_path / "server.crt")  # relative to the web config's directory
    assert tls.client_ca_file == str(tmp_path / "ca.crt")
    assert tls.client_auth_type == "RequireAndVerifyClientCert"
    assert tls.client_allowed_sans == ("client.example", "10.0.0.1")
    assert tls.prefer_server_cipher_suites is False
    assert config.tls_context is not None
    assert config.http.http2 is False
    # A blank header is "unset", as the toolkit documents.
    assert dict(config.http.headers) == {
        "Strict-Transport-Security": "max-age=31536000",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "sameorigin",
        "X-XSS-Protection": "1; mode=block",
    }
    assert config.users == {"alice": HASH_ALICE}
    assert config.rate_limit is not None
    assert config.rate_limit.interval_s == 90 and config.rate_limit.burst == 5
    # X25519 alone: set where this Python can, else OpenSSL's defaults (X25519 first), said once.
    assert config.warnings in ((), (X25519_DEFAULTS,))


def test_tls_settings_without_certificate_mean_no_tls(tmp_path: Path) -> None:
    """The toolkit only turns TLS on when a cert, key, CA or client_auth_type is set."""
    config = WebConfig.load(write(tmp_path, "tls_server_config:\n  min_version: TLS13\n"))
    assert config.tls is None


def test_inline_cert_key_and_merge_keys(tmp_path: Path, pki: Path) -> None:
    def block(name: str) -> str:
        return textwrap.indent((pki / name).read_text(), " " * 4)

    path = write(
        tmp_path,
        "common: &common\n  min_version: TLS12\n"
        "tls_server_config:\n"
        "  <<: *common\n"
        f"  cert: |\n{block('server.crt')}"
        f"  key: |\n{block('server.key')}",
    )
    # "common" is not a toolkit key: the anchor must live inside a known key to be legal.
    with pytest.raises(ConfigError, match='unknown key "common"'):
        WebConfig.load(path)
    path = write(
        tmp_path,
        "tls_server_config:\n"
        "  <<: {min_version: TLS13}\n"
        f"  cert: |\n{block('server.crt')}"
        f"  key: |\n{block('server.key')}",
    )
    config = WebConfig.load(path)
    assert config.tls is not None and config.tls.min_version == "TLS13"
    assert config.tls_context is not None
    assert "BEGIN" not in repr(config)  # inline keys stay out of logs


def test_several_curves_are_narrowed_with_a_warning(tmp_path: Path, pki: Path) -> None:
    config = WebConfig.load(
        write(
            tmp_path,
            f"""
            tls_server_config:
              cert_file: {pki}/server.crt
              key_file: {pki}/server.key
              curve_preferences: [CurveP384, X25519]
            """,
        )
    )
    assert config.warnings == (
        "curve_preferences: this Python's ssl module can set only one curve, so only CurveP384"
        " is offered (ignored: X25519)",
    )


X25519_DEFAULTS = (
    "curve_preferences: this Python's ssl module cannot offer X25519 alone, so OpenSSL's "
    "default groups are offered, X25519 first"
)


def test_x25519_where_this_python_cannot_set_it_keeps_openssl_s_defaults(
    tmp_path: Path, pki: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Debian 12's Python 3.11.2 refuses set_ecdh_curve("X25519") ("unknown group"), which
    failed the README's test command there: OpenSSL's defaults offer X25519 first, so the
    preference holds, with a warning, instead of a refused file."""
    import ssl

    real = ssl.SSLContext.set_ecdh_curve

    def debian_3_11_2(self: ssl.SSLContext, name: str) -> None:
        if name == "X25519":
            raise ssl.SSLError(1, "[EC: UNKNOWN_GROUP] unknown group (_ssl.c:4346)")
        real(self, name)

    monkeypatch.setattr(ssl.SSLContext, "set_ecdh_curve", debian_3_11_2)
    text = f"tls_server_config:\n  cert_file: {pki}/server.crt\n  key_file: {pki}/server.key\n"
    config = WebConfig.load(write(tmp_path, text + "  curve_preferences: [X25519]\n"))
    assert config.tls_context is not None
    assert config.warnings == (X25519_DEFAULTS,)
    with pytest.raises(ConfigError, match="curve_preferences"):  # any other refusal stays one
        monkeypatch.setattr(
            ssl.SSLContext, "set_ecdh_curve", lambda self, name: debian_3_11_2(self, "X25519")
        )
        WebConfig.load(write(tmp_path, text + "  curve_preferences: [CurveP384]\n"))


def test_zero_interval_disables_rate_limit(tmp_path: Path) -> None:
    assert WebConfig.load(write(tmp_path, "rate_limit:\n  interval: 0\n")).rate_limit is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("1m30s", 90.0), ("500ms", 0.5), ("1.5h", 5400.0), ("0", 0.0), ("2us", 2e-6)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert _parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "s", "1x", "1s2", "1 s"])
def test_bad_go_durations(text: str) -> None:
    assert _parse_go_duration(text) is None


# -- basic auth units ---------------------------------------------------------------------------


def test_parse_basic_authorization() -> None:
    token = base64.b64encode(b"al:ice:pass:word").decode()
    assert parse_basic_authorization(f"Basic {token}") == (b"al", b"ice:pass:word")
    assert parse_basic_authorization(f"bAsIc {token}") == (b"al", b"ice:pass:word")
    assert parse_basic_authorization(None) is None
    assert parse_basic_authorization(f"Bearer {token}") is None
    assert parse_basic_authorization("Basic !!!not-base64") is None
    assert parse_basic_authorization("Basic " + base64.b64encode(b"no-colon").decode()) is None


def test_bcrypt_hash_error_accepts_htpasswd_hashes() -> None:
    assert bcrypt_hash_error(HASH_ALICE) is None
    assert bcrypt_hash_error(HASH_ALICE.replace("$2b$", "$2y$", 1)) is None  # htpasswd -B
    assert bcrypt_hash_error("$2b$32$" + "a" * 53) is not None
    assert bcrypt_hash_error(HASH_ALICE[:-1]) is not None


async def test_cache_unknown_user_and_long_password_costs() -> None:
    auth = BasicAuth({"alice": HASH_ALICE, "long": HASH_LONG})
    try:
        calls = auth.checker

        async def check(user: str, password: str) -> bool:
            return await auth.check(basic(user, password)["Authorization"])

        assert await check("alice", ALICE_PW) and calls.calls == 1
        assert await check("alice", ALICE_PW) and calls.calls == 1  # cached
        assert not await check("alice", "wrong") and calls.calls == 2  # failures are not cached
        assert not await check("alice", "wrong") and calls.calls == 3
        # An unknown user costs a bcrypt too, every time: no user enumeration by timing.
        assert not await check("mallory", ALICE_PW) and calls.calls == 4
        assert not await check("mallory", ALICE_PW) and calls.calls == 5
        # Passwords over 72 bytes: only the first 72 count (Go's bcrypt and htpasswd behave so).
        assert await check("long", LONG_PW)
        assert await check("long", LONG_PW[:72])
        assert not await check("long", "q" + LONG_PW[1:])
        # A changed hash invalidates the cached success for the old password.
        auth.set_users({"alice": HASH_OTHER})
        assert not await check("alice", ALICE_PW)
        assert await check("alice", "something-else")
    finally:
        auth.close()


async def test_cache_is_bounded_and_evicts_the_least_recent() -> None:
    auth = BasicAuth({u: HASH_ALICE for u in ("a", "b", "c")}, cache_size=2)
    try:

        async def check(user: str) -> bool:
            return await auth.check(basic(user, ALICE_PW)["Authorization"])

        for user in ("a", "b", "c"):
            assert await check(user)
        assert auth.checker.calls == 3
        assert await check("c") and auth.checker.calls == 3  # still cached
        assert await check("a") and auth.checker.calls == 4  # evicted, checked again
    finally:
        auth.close()


# -- over HTTP ----------------------------------------------------------------------------------


@asynccontextmanager
async def serve(runtime: WebConfigRuntime, app: App) -> AsyncIterator[str]:
    runtime.setup(app)
    listener = Listener(app)
    await listener.start([ListenAddress("127.0.0.1", 0)], runtime.ssl_context())
    host, port = listener.addresses[0]
    try:
        yield f"http://{host}:{port}"
    finally:
        await listener.close(1.0)


def plain_app() -> App:
    app = App()

    async def ok(request: Request) -> Response:
        return text("ok")

    async def large(request: Request) -> Response:
        return Response(200, (b"x" * CHUNK_BYTES,) * 3)  # sent in chunks

    async def broken(request: Request) -> Response:
        raise RuntimeError("a bug in a handler")

    app.add_get("/", ok)
    app.add_get("/large", large)
    app.add_get("/broken", broken)
    return app


USERS_AND_HEADERS = """
basic_auth_users:
  alice: {hash}
http_server_config:
  headers:
    X-Frame-Options: deny
    X-Content-Type-Options: nosniff
    Content-Security-Policy: default-src 'none'
"""


async def test_basic_auth_statuses_and_headers(tmp_path: Path) -> None:
    runtime = WebConfigRuntime(write(tmp_path, USERS_AND_HEADERS.format(hash=HASH_ALICE)))
    async with serve(runtime, plain_app()) as base, aiohttp.ClientSession() as client:
        cases = [
            ({}, 401),
            (basic("alice", ALICE_PW), 200),
            (basic("alice", "wrong"), 401),
            (basic("bob", ALICE_PW), 401),
            ({"Authorization": "Basic not-base64!"}, 401),
            ({"Authorization": "Bearer abc"}, 401),
        ]
        for headers, status in cases:
            async with client.get(base + "/", headers=headers) as resp:
                assert resp.status == status, headers
                if status == 401:
                    assert resp.headers["WWW-Authenticate"] == "Basic"
                    assert await resp.text() == "Unauthorized"
                else:
                    assert await resp.text() == "ok"
                assert resp.headers["X-Frame-Options"] == "deny"
                assert resp.headers["X-Content-Type-Options"] == "nosniff"
                assert resp.headers["Content-Security-Policy"] == "default-src 'none'"
        # Headers also reach the server's own 404 and 500 and a body sent in chunks.
        for path, status in (("/missing", 404), ("/large", 200), ("/broken", 500)):
            async with client.get(base + path, headers=basic("alice", ALICE_PW)) as resp:
                assert resp.status == status
                assert resp.headers["X-Frame-Options"] == "deny"
    # alice once (then cached), wrong password once, unknown user once.
    assert runtime.bcrypt_checks == 3


async def test_headers_reach_a_refused_method(tmp_path: Path) -> None:
    runtime = WebConfigRuntime(write(tmp_path, USERS_AND_HEADERS.format(hash=HASH_ALICE)))
    async with (
        serve(runtime, plain_app()) as base,
        aiohttp.ClientSession() as client,
        client.post(base + "/", headers=basic("alice", ALICE_PW)) as resp,
    ):
        assert resp.status == 405
        assert resp.headers["Allow"] == "GET, HEAD"
        assert resp.headers["X-Frame-Options"] == "deny"


async def test_no_users_means_no_auth(tmp_path: Path) -> None:
    runtime = WebConfigRuntime(write(tmp_path, "basic_auth_users: {}\n"))
    async with (
        serve(runtime, plain_app()) as base,
        aiohttp.ClientSession() as client,
        client.get(base + "/") as resp,
    ):
        assert resp.status == 200
        assert "X-Frame-Options" not in resp.headers
    assert runtime.bcrypt_checks == 0


async def test_event_loop_is_served_during_a_bcrypt_check(tmp_path: Path) -> None:
    """A slow (cost 12) check must not stop the loop: a cached user is answered meanwhile."""
    slow_hash = bcrypt.hashpw(b"slow-password", bcrypt.gensalt(12)).decode()
    text = f"basic_auth_users:\n  alice: {HASH_ALICE}\n  slow: {slow_hash}\n"
    runtime = WebConfigRuntime(write(tmp_path, text))
    async with serve(runtime, plain_app()) as base, aiohttp.ClientSession() as client:
        async with client.get(base + "/", headers=basic("alice", ALICE_PW)) as resp:
            assert resp.status == 200  # now cached
        checks = runtime.bcrypt_checks

        async def slow_request() -> int:
            async with client.get(base + "/", headers=basic("slow", "slow-password")) as resp:
                return resp.status

        slow = asyncio.create_task(slow_request())
        deadline = time.monotonic() + 5
        while runtime.bcrypt_checks == checks and time.monotonic() < deadline:
            await asyncio.sleep(0.001)  # wait until the slow bcrypt has started
        served_meanwhile = 0
        for _ in range(5):
            async with client.get(base + "/", headers=basic("alice", ALICE_PW)) as resp:
                assert resp.status == 200
            if not slow.done():
                served_meanwhile += 1
        assert served_meanwhile == 5
        assert await slow == 200


async def test_users_and_headers_reload_and_bad_file_keeps_previous(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, USERS_AND_HEADERS.format(hash=HASH_ALICE))
    runtime = WebConfigRuntime(path, check_interval=0)
    async with serve(runtime, plain_app()) as base, aiohttp.ClientSession() as client:
        async with client.get(base + "/", headers=basic("alice", ALICE_PW)) as resp:
            assert resp.status == 200
        # Rotate alice's password and drop a header.
        Path(path).write_text(
            f"basic_auth_users:\n  alice: {HASH_OTHER}\n"
            "http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n"
        )
        async with client.get(base + "/", headers=basic("alice", ALICE_PW)) as resp:
            assert resp.status == 401  # the cached success was for the old hash
        async with client.get(base + "/", headers=basic("alice", "something-else")) as resp:
            assert resp.status == 200
            assert resp.headers["X-Frame-Options"] == "sameorigin"
            assert "X-Content-Type-Options" not in resp.headers
        # A broken file is logged once and changes nothing.
        caplog.set_level(logging.WARNING, logger="vgpumon.export.webconfig")
        Path(path).write_text("basic_auth_users:\n  alice: not-a-hash\n")
        for _ in range(3):
            async with client.get(base + "/", headers=basic("alice", "something-else")) as resp:
                assert resp.status == 200
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        message = warnings[0].getMessage()
        assert "basic_auth_users.alice: the password hash is not a bcrypt hash" in message
        assert message.endswith("; keeping the previous web config")
        # Fixing the file applies it.
        Path(path).write_text(f"basic_auth_users:\n  bob: {HASH_ALICE}\n")
        async with client.get(base + "/", headers=basic("bob", ALICE_PW)) as resp:
            assert resp.status == 200


@pytest.mark.parametrize(
    "emptied",
    [
        "",
        "# being rewritten\n",
        "basic_auth_users: {}\n",
        "basic_auth_users:\n",
        "http_server_config: {}\n",
    ],
    ids=["empty", "comment only", "no users", "users null", "other section only"],
)
async def test_a_reload_that_loses_every_user_keeps_the_last_good_ones(
    tmp_path: Path, emptied: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An emptied or truncated web config (a deploy that wrote half of it) turned basic auth off
    with one INFO line (issue 33): it is refused as switching TLS is, with a warning."""
    path = write(tmp_path, f"basic_auth_users:\n  alice: {HASH_ALICE}\n")
    runtime = WebConfigRuntime(path, check_interval=0)
    caplog.set_level(logging.WARNING, logger="vgpumon.export.webconfig_runtime")
    async with serve(runtime, plain_app()) as base, aiohttp.ClientSession() as client:
        Path(path).write_text(emptied)
        async with client.get(base + "/") as resp:
            assert resp.status == 401
        async with client.get(base + "/", headers=basic("alice", ALICE_PW)) as resp:
            assert resp.status == 200
    assert "would turn basic auth off" in caplog.text
    assert runtime.config.users == {"alice": HASH_ALICE}


def test_a_world_writable_web_config_and_a_world_readable_key_are_warned_of(
    tmp_path: Path, pki: Path
) -> None:
    key = tmp_path / "server.key"
    key.write_bytes((pki / "server.key").read_bytes())
    path = Path(
        write(tmp_path, f"tls_server_config:\n  cert_file: {pki}/server.crt\n  key_file: {key}\n")
    )
    key.chmod(0o600)
    path.chmod(0o644)
    assert WebConfig.load(str(path)).warnings == ()
    key.chmod(0o644)
    path.chmod(0o666)
    warnings = WebConfig.load(str(path)).warnings
    assert any("writable by every user" in w for w in warnings), warnings
    assert any("readable by every user" in w and str(key) in w for w in warnings), warnings


async def test_reload_is_throttled(tmp_path: Path) -> None:
    path = write(tmp_path, "basic_auth_users: {}\n")
    runtime = WebConfigRuntime(path, check_interval=3600)
    Path(path).write_text(f"basic_auth_users:\n  alice: {HASH_ALICE}\n")
    assert runtime.check_for_changes() is False
    assert runtime.config.users == {}
    assert runtime.check_for_changes(force=True) is True
    assert runtime.config.users == {"alice": HASH_ALICE}


async def test_turning_tls_on_by_reload_is_refused(
    tmp_path: Path, pki: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, "")
    runtime = WebConfigRuntime(path, check_interval=0)
    assert runtime.ssl_context() is None
    caplog.set_level(logging.WARNING, logger="vgpumon.export.webconfig")
    Path(path).write_text(
        f"tls_server_config:\n  cert_file: {pki}/server.crt\n  key_file: {pki}/server.key\n"
    )
    assert runtime.check_for_changes() is False
    assert runtime.config.tls is None
    assert "switching TLS on needs a restart" in caplog.text


async def test_rate_limit(tmp_path: Path) -> None:
    runtime = WebConfigRuntime(write(tmp_path, "rate_limit:\n  interval: 1h\n  burst: 2\n"))
    async with serve(runtime, plain_app()) as base, aiohttp.ClientSession() as client:
        statuses = []
        for _ in range(3):
            async with client.get(base + "/") as resp:
                statuses.append(resp.status)
        assert statuses == [200, 200, 429]


def test_error_messages_name_the_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, f"basic_auth_users:\n  alice: {HASH_ALICE}\n\n  bob: nope\n")
    with pytest.raises(ConfigError) as err:
        WebConfig.load(path)
    assert re.fullmatch(
        rf"web config {re.escape(path)} line 4: basic_auth_users\.bob: the password hash is not"
        r" a bcrypt hash .*",
        str(err.value),
    )


async def test_setup_puts_the_middleware_outermost(tmp_path: Path) -> None:
    """Middlewares the app already has must not run for a request that fails authentication."""
    seen: list[str] = []

    async def app_middleware(request: Request, handler: Handler) -> Response:
        seen.append(request.path)
        return await handler(request)

    app = plain_app()
    app.middlewares.append(app_middleware)
    runtime = WebConfigRuntime(write(tmp_path, f"basic_auth_users:\n  alice: {HASH_ALICE}\n"))
    async with serve(runtime, app) as base, aiohttp.ClientSession() as client:
        async with client.get(base + "/") as resp:
            assert resp.status == 401
        assert seen == []
        async with client.get(base + "/", headers=basic("alice", ALICE_PW)) as resp:
            assert resp.status == 200
        assert seen == ["/"]


# -- bounded authentication ----------------------------------------------------------------------


async def test_failed_logins_are_rate_limited_per_address(tmp_path: Path) -> None:
    runtime = WebConfigRuntime(write(tmp_path, f"basic_auth_users:\n  alice: {HASH_ALICE}\n"))
    runtime._auth.limiter = FailureLimiter(burst=3, per_second=0.001)
    async with serve(runtime, plain_app()) as base, aiohttp.ClientSession() as client:
        async with client.get(base + "/", headers=basic("alice", ALICE_PW)) as resp:
            assert resp.status == 200  # cached from now on
        statuses = []
        for user in ("alice", "nobody", "alice", "nobody", "alice"):
            async with client.get(base + "/", headers=basic(user, "wrong")) as resp:
                statuses.append(resp.status)
        assert statuses == [401, 401, 401, 429, 429], "unknown users and bad passwords alike"
        checks = runtime.bcrypt_checks
        async with client.get(base + "/", headers=basic("alice", ALICE_PW)) as resp:
            assert resp.status == 200, "a cached success is never limited"
        assert runtime.bcrypt_checks == checks, "refusals and cache hits cost no bcrypt"


async def test_the_bcrypt_queue_is_bounded() -> None:
    auth = BasicAuth({"alice": HASH_ALICE}, max_pending=2)
    auth.limiter = FailureLimiter(burst=1000)
    release = threading.Event()
    real = auth.checker

    def slow(password: bytes, hashed: bytes) -> bool:
        release.wait(10)
        return real(password, hashed)

    auth.checker = slow  # type: ignore[assignment]
    header = basic("alice", "wrong")["Authorization"]
    # One check runs, two wait: the queue is full for a check of no better rank.
    held = []
    for n in (1, 3, 4):
        held.append(asyncio.create_task(auth.check(header, f"10.0.0.{n}")))
        await asyncio.sleep(0.05)
    with pytest.raises(AuthRefused) as refused:
        await asyncio.wait_for(auth.check(header, "10.0.0.2"), 2)
    assert refused.value.status == 503
    release.set()
    assert await asyncio.gather(*held) == [False, False, False]
    ok = basic("alice", ALICE_PW)["Authorization"]
    assert await auth.check(ok, "10.0.0.2") is True, "room again once the queue drains"
    auth.close()


def test_failure_limiter_refills_and_forgets_old_addresses() -> None:
    now = [0.0]
    limiter = FailureLimiter(burst=2, per_second=1.0, tracked=2, clock=lambda: now[0])
    limiter.failed("a")
    limiter.failed("a")
    assert not limiter.allowed("a") and limiter.allowed("b")
    now[0] = 1.0
    assert limiter.allowed("a"), "one token back after a second"
    limiter.failed("b")
    limiter.failed("c")
    assert len(limiter._buckets) == 2 and "a" not in limiter._buckets


# -- line numbers ----------------------------------------------------------------------------------


def test_burst_error_names_the_burst_line(tmp_path: Path) -> None:
    path = write(tmp_path, "rate_limit:\n  interval: 1s\n\n  burst: -1\n")
    with pytest.raises(ConfigError, match=r"web\.yml line 4: rate_limit\.burst must be at least"):
        WebConfig.load(path)


async def test_a_stuck_reload_does_not_stall_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The reload runs off the event loop: a file read that never returns costs a request 0.5 s."""
    caplog.set_level(logging.WARNING, logger="vgpumon.export.webconfig")
    path = write(tmp_path, "basic_auth_users: {}\n")
    runtime = WebConfigRuntime(path, check_interval=0)
    release = threading.Event()
    real_load = WebConfig.load

    def stuck(cls: type[WebConfig], where: str) -> WebConfig:
        release.wait(30)
        return real_load(where)

    async with serve(runtime, plain_app()) as base, aiohttp.ClientSession() as client:
        monkeypatch.setattr(WebConfig, "load", classmethod(stuck))
        Path(path).write_text("basic_auth_users: {}\n# changed\n")
        for _ in range(3):
            started = time.monotonic()
            async with client.get(base + "/") as resp:
                assert resp.status == 200
            assert time.monotonic() - started < 5
        assert caplog.text.count("reloading takes longer") == 1, "waited on once, not again"
        release.set()
