"""Prometheus exporter-toolkit ``web-config.yml`` for ``vgpumon serve``: TLS, basic auth, headers.

Operators already write this file for node_exporter and friends (``--web.config.file``), so
vgpumon reads the same keys with the same defaults and the same validation, and refuses what it
cannot honour instead of silently doing something weaker. Where Go's ``crypto/tls`` and Python's
``ssl`` differ, the mapping (and every refusal) is documented in docs/web-config.md.

Two layers:

* :class:`WebConfig` is one parsed, checked file: every referenced certificate, key and CA is
  loaded into an ``ssl.SSLContext`` while parsing, so a bad file fails at start with a one-line
  :class:`~vgpumon.errors.ConfigError` naming the key and its line.
* :class:`~vgpumon.export.webconfig_runtime.WebConfigRuntime` (a module of its own) owns the
  current config and re-reads it (and the cert/key/CA files) when they change, at most once per
  ``check_interval``. New TLS connections are made by the newest good context, so rotated
  certificates apply without a restart; a bad file keeps the previous config.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import ssl
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import yaml

from vgpumon import yamlfile
from vgpumon.errors import ConfigError, one_line
from vgpumon.export.auth import bcrypt_hash_error
from vgpumon.units import UnitError, parse_go_duration

log = logging.getLogger(__name__)

_TAG = "tag:yaml.org,2002:"

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
_TLS_KEYS = (
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
)
_HTTP_KEYS = ("http2", "headers")
_RATE_KEYS = ("interval", "burst")

# The toolkit's extraHTTPHeaders: only these may be set; a non-empty tuple lists the allowed values.
ALLOWED_HEADERS: Mapping[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

_CLIENT_AUTH_TYPES = (
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
)
_CLIENT_AUTH_ALIASES = {"": "NoClientCert", "RequireClientCert": "RequireAnyClientCert"}
_NEEDS_CA = ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
# RequestClientCert asks for a certificate and ignores it; Python cannot accept a certificate
# without verifying it, and vgpumon never reads an unverified one, so it is NoClientCert here.
_VERIFY_MODES = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}

_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# Go's tls.CipherSuites() (the names the toolkit accepts) for TLS 1.0-1.2, as OpenSSL names.
GO_TLS12_CIPHERS: Mapping[str, str] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
# Go accepts these names but ignores them (TLS 1.3 suites are not configurable there either).
GO_TLS13_CIPHERS = (
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
)
# Go's tls.InsecureCipherSuites(): the toolkit rejects them as unknown, and so does vgpumon.
_GO_INSECURE_CIPHERS = (
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
)
# TLS 1.2 suites offered when the file names none: Go's default list without its CBC-SHA ones, i.e.
# ECDHE with AEAD only. OpenSSL's default adds CBC-SHA256/384 suites, which testssl reports as
# "potentially vulnerable" to LUCKY13; a file that lists CBC suites still gets them.
DEFAULT_TLS12_CIPHERS = (
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
)
# TLS 1.0/1.1 need SHA-1 and OpenSSL 3 security level 0; only used when the file asks for them.
_LEGACY_CIPHERS = "@SECLEVEL=0:ECDH+AESGCM:ECDH+CHACHA20:ECDH+AES:!aNULL:!eNULL:!aDSS:!AESCCM"

GO_CURVES: Mapping[str, str] = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}

_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----")
_PEM_KEY = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")

Stamp = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class TLSServerConfig:
    """``tls_server_config`` with relative paths resolved against the web config's directory."""

    cert_file: str = ""
    key_file: str = ""
    cert: str = field(default="", repr=False)
    key: str = field(default="", repr=False)
    client_ca_file: str = ""
    client_ca: str = field(default="", repr=False)
    client_auth_type: str = "NoClientCert"
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()


@dataclass(frozen=True)
class HTTPServerConfig:
    """``http_server_config``: ``http2`` is accepted for compatibility (vgpumon speaks HTTP/1.1)."""

    http2: bool = True
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RateLimit:
    """``rate_limit``: a token bucket refilled one token per ``interval_s``, holding ``burst``."""

    interval_s: float
    burst: int


@dataclass(frozen=True)
class WebConfig:
    """One parsed and fully checked web config file."""

    path: str
    tls: TLSServerConfig | None = None
    http: HTTPServerConfig = field(default_factory=HTTPServerConfig)
    basic_auth_users: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    rate_limit: RateLimit | None = None
    # Settings honoured only approximately (see docs/web-config.md); the runtime logs them.
    warnings: tuple[str, ...] = ()
    # Built from this file while loading it; new connections are wrapped by it.
    tls_context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)
    # (path, stamp) of the file itself and of every file it names, taken before they were read.
    file_stamps: tuple[tuple[str, Stamp | None], ...] = field(default=(), compare=False, repr=False)

    @property
    def users(self) -> dict[str, str]:
        """``basic_auth_users`` as user name -> bcrypt hash."""
        return dict(self.basic_auth_users)

    @classmethod
    def load(cls, path: str) -> WebConfig:
        """Read, validate and build ``path``; raises ConfigError with the key and line at fault."""
        return _Loader(path).load()


def file_stamp(path: str) -> Stamp | None:
    """What changes when a file is rewritten, replaced or re-linked; None when stat fails."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev, st.st_ctime_ns)


class _Loader:
    """Walks the YAML node tree (not plain dicts) so every error can name its line."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.dir = os.path.dirname(os.path.abspath(path))
        self.stamps: list[tuple[str, Stamp | None]] = []
        self.warnings: list[str] = []

    # -- errors and typed scalars -------------------------------------------------------------

    def error(self, node: yaml.Node | None, message: str) -> ConfigError:
        where = self.path if node is None else f"{self.path} line {node.start_mark.line + 1}"
        return ConfigError(f"web config {where}: {one_line(message)}")

    @staticmethod
    def _is_null(node: yaml.Node) -> bool:
        return isinstance(node, yaml.ScalarNode) and node.tag == _TAG + "null"

    def mapping(
        self, node: yaml.Node, where: str, allowed: Sequence[str] | None
    ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """Keys of a mapping node; unknown and duplicate keys are errors (yaml.UnmarshalStrict)."""
        if self._is_null(node):
            return {}
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{where} must be a mapping")
        return yamlfile.mapping(node, f"web config {self.path}", where, allowed)

    def string(self, node: yaml.Node, where: str) -> str:
        # Like yaml.v2 decoding into a Go string: any scalar is taken as written, null is "".
        if self._is_null(node):
            return ""
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, f"{where} must be a string")
        return str(node.value)

    def boolean(self, node: yaml.Node, where: str, default: bool) -> bool:
        if self._is_null(node):
            return default
        if not isinstance(node, yaml.ScalarNode) or node.tag != _TAG + "bool":
            raise self.error(node, f"{where} must be true or false")
        return str(node.value).lower() in ("true", "yes", "on")

    def integer(self, node: yaml.Node, where: str) -> int:
        if not isinstance(node, yaml.ScalarNode) or node.tag != _TAG + "int":
            raise self.error(node, f"{where} must be an integer")
        value = yaml.constructor.SafeConstructor().construct_yaml_int(node)
        return int(value)

    def strings(self, node: yaml.Node, where: str) -> tuple[str, ...]:
        if self._is_null(node):
            return ()
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, f"{where} must be a list of strings")
        return tuple(self.string(item, f"{where} entry") for item in node.value)

    def resolve(self, path: str) -> str:
        """Relative file names are relative to the web config's directory (as in the toolkit)."""
        return path if not path or os.path.isabs(path) else os.path.join(self.dir, path)

    def read(self, node: yaml.Node, key: str, path: str) -> bytes:
        """A certificate, key or CA file: a regular file of at most 1 MiB (a FIFO or a device
        named here would block or fill memory), read through :mod:`vgpumon.yamlfile`."""
        try:
            yamlfile.check_path(path, key)
        except ConfigError as err:
            raise self.error(node, str(err)) from None
        self.stamps.append((path, file_stamp(path)))
        try:
            return yamlfile.read_bytes(path, key)
        except ConfigError as err:
            raise self.error(node, str(err)) from None

    # -- the file -------------------------------------------------------------------------------

    def load(self) -> WebConfig:
        path = os.path.abspath(yamlfile.check_path(self.path, "web config"))
        self.stamps.append((path, file_stamp(path)))
        # Regular file, size, UTF-8, depth, aliases and duplicate keys: the shared loader.
        root = yamlfile.load_node(self.path, "web config")

        top = {} if root is None else self.mapping(root, "the web config", _TOP_KEYS)
        tls: TLSServerConfig | None = None
        context: ssl.SSLContext | None = None
        if "tls_server_config" in top:
            tls, context = self.tls(*top["tls_server_config"])
        http = self.http(top["http_server_config"][1]) if "http_server_config" in top else None
        users = self.users(top["basic_auth_users"][1]) if "basic_auth_users" in top else ()
        rate = self.rate_limit(top["rate_limit"][1]) if "rate_limit" in top else None
        return WebConfig(
            path=self.path,
            tls=tls,
            http=http or HTTPServerConfig(),
            basic_auth_users=users,
            rate_limit=rate,
            warnings=tuple(self.warnings),
            tls_context=context,
            file_stamps=tuple(self.stamps),
        )

    def http(self, node: yaml.Node) -> HTTPServerConfig:
        keys = self.mapping(node, "http_server_config", _HTTP_KEYS)
        http2 = True
        if "http2" in keys:
            http2 = self.boolean(keys["http2"][1], "http_server_config.http2", True)
        headers: list[tuple[str, str]] = []
        if "headers" in keys:
            for name, (key, value) in self.mapping(keys["headers"][1], "headers", None).items():
                if name not in ALLOWED_HEADERS:
                    raise self.error(
                        key,
                        f'HTTP header "{name}" can not be configured'
                        f" (allowed: {', '.join(ALLOWED_HEADERS)})",
                    )
                text = self.string(value, f"headers.{name}")
                allowed = ALLOWED_HEADERS[name]
                if allowed and text not in allowed:
                    wanted = " ".join(f'"{v}"' for v in allowed)
                    raise self.error(
                        value,
                        f'invalid value for {name}. Expected one of: [{wanted}], but got: "{text}"',
                    )
                if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text if c != "\t"):
                    raise self.error(value, f"headers.{name} contains a control character")
                if text:  # the toolkit documents a blank value as "unset"
                    headers.append((name, text))
        return HTTPServerConfig(http2=http2, headers=tuple(headers))

    def users(self, node: yaml.Node) -> tuple[tuple[str, str], ...]:
        out: list[tuple[str, str]] = []
        for name, (key, value) in self.mapping(node, "basic_auth_users", None).items():
            if ":" in name:
                raise self.error(key, f'basic_auth_users: user name "{name}" contains ":"')
            hashed = self.string(value, f"basic_auth_users.{name}")
            problem = bcrypt_hash_error(hashed)
            if problem is not None:
                raise self.error(value, f"basic_auth_users.{name}: the password hash {problem}")
            out.append((name, hashed))
        return tuple(out)

    def rate_limit(self, node: yaml.Node) -> RateLimit | None:
        keys = self.mapping(node, "rate_limit", _RATE_KEYS)
        interval = 0.0
        if "interval" in keys:
            interval = self.duration(keys["interval"][1], "rate_limit.interval")
        burst = self.integer(keys["burst"][1], "rate_limit.burst") if "burst" in keys else 0
        if interval == 0:  # the toolkit's "0 disables the rate limiter"
            return None
        if burst < 1:
            # The burst line itself when it is written, else the rate_limit key's own line.
            at = keys["burst"][1] if "burst" in keys else None
            raise self.error(
                at if at is not None else node,
                "rate_limit.burst must be at least 1 (0 would refuse every request)",
            )
        return RateLimit(interval_s=interval, burst=burst)

    def duration(self, node: yaml.Node, where: str) -> float:
        """A Go duration ("30s", "1m30s", "500ms"); a bare integer is nanoseconds, as in yaml.v2."""
        if isinstance(node, yaml.ScalarNode) and node.tag == _TAG + "int":
            seconds = self.integer(node, where) * 1e-9
        else:
            text = self.string(node, where)
            parsed = _parse_go_duration(text)
            if parsed is None:
                raise self.error(node, f'{where}: invalid duration "{text}" (e.g. "1s", "500ms")')
            seconds = parsed
        if seconds < 0:
            raise self.error(node, f"{where} must not be negative")
        return seconds

    # -- tls_server_config ----------------------------------------------------------------------

    def tls(
        self, section_key: yaml.Node, node: yaml.Node
    ) -> tuple[TLSServerConfig | None, ssl.SSLContext | None]:
        keys = self.mapping(node, "tls_server_config", _TLS_KEYS)

        def text(name: str) -> str:
            return self.string(keys[name][1], f"tls_server_config.{name}") if name in keys else ""

        def at(name: str) -> yaml.Node:
            return keys[name][0] if name in keys else section_key

        versions: dict[str, str] = {}
        for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
            value = text(name) or default
            if value not in _TLS_VERSIONS:
                raise self.error(
                    at(name),
                    f"unknown TLS version: {value} (expected one of {', '.join(_TLS_VERSIONS)})",
                )
            versions[name] = value
        if _TLS_VERSIONS[versions["min_version"]] > _TLS_VERSIONS[versions["max_version"]]:
            raise self.error(
                at("min_version"),
                f"min_version {versions['min_version']} is above max_version"
                f" {versions['max_version']}",
            )
        ciphers = (
            self.strings(keys["cipher_suites"][1], "cipher_suites")
            if "cipher_suites" in keys
            else ()
        )
        for name in ciphers:
            if name not in GO_TLS12_CIPHERS and name not in GO_TLS13_CIPHERS:
                hint = " (Go lists it as insecure)" if name in _GO_INSECURE_CIPHERS else ""
                raise self.error(at("cipher_suites"), f"unknown cipher: {name}{hint}")
        curves: tuple[str, ...] = ()
        if "curve_preferences" in keys:
            curves = self.strings(keys["curve_preferences"][1], "curve_preferences")
        for name in curves:
            if name not in GO_CURVES:
                raise self.error(
                    at("curve_preferences"),
                    f"unknown curve: {name} (expected one of {', '.join(GO_CURVES)})",
                )
        auth_type = text("client_auth_type")
        auth_type = _CLIENT_AUTH_ALIASES.get(auth_type, auth_type)
        if auth_type not in _CLIENT_AUTH_TYPES:
            raise self.error(
                at("client_auth_type"),
                f'invalid client_auth_type "{auth_type}"'
                f" (expected one of {', '.join(_CLIENT_AUTH_TYPES)})",
            )
        sans: tuple[str, ...] = ()
        if "client_allowed_sans" in keys:
            sans = self.strings(keys["client_allowed_sans"][1], "client_allowed_sans")
        prefer = True
        if "prefer_server_cipher_suites" in keys:
            prefer = self.boolean(
                keys["prefer_server_cipher_suites"][1], "prefer_server_cipher_suites", True
            )

        config = TLSServerConfig(
            cert_file=self.resolve(text("cert_file")),
            key_file=self.resolve(text("key_file")),
            cert=text("cert"),
            key=text("key"),
            client_ca_file=self.resolve(text("client_ca_file")),
            client_ca=text("client_ca"),
            client_auth_type=auth_type,
            client_allowed_sans=sans,
            min_version=versions["min_version"],
            max_version=versions["max_version"],
            cipher_suites=ciphers,
            prefer_server_cipher_suites=prefer,
            curve_preferences=curves,
        )
        # The toolkit serves plain HTTP unless one of these is set (TLSConfig.IsEnabled).
        if not (
            config.cert_file
            or config.cert
            or config.key_file
            or config.key
            or config.client_ca_file
            or config.client_ca
            or text("client_auth_type")
        ):
            return None, None
        return config, self.tls_context(config, at)

    def tls_context(self, c: TLSServerConfig, at: Callable[[str], yaml.Node]) -> ssl.SSLContext:
        for inline, path in (
            ("cert", "cert_file"),
            ("key", "key_file"),
            ("client_ca", "client_ca_file"),
        ):
            if getattr(c, inline) and getattr(c, path):
                raise self.error(at(inline), f"set only one of {inline} and {path}")
        if not (c.cert or c.cert_file):
            raise self.error(at("cert_file"), "tls_server_config: missing one of cert or cert_file")
        if not (c.key or c.key_file):
            raise self.error(at("key_file"), "tls_server_config: missing one of key or key_file")
        has_ca = bool(c.client_ca or c.client_ca_file)
        if c.client_auth_type == "RequireAnyClientCert":
            raise self.error(
                at("client_auth_type"),
                "client_auth_type RequireAnyClientCert (accept any client certificate without"
                " verifying it) cannot be done with Python's ssl module; use"
                " RequireAndVerifyClientCert with client_ca_file",
            )
        if has_ca and c.client_auth_type == "NoClientCert":
            raise self.error(
                at("client_ca_file" if c.client_ca_file else "client_ca"),
                "client CA's have been configured without a Client Auth Policy"
                " (set client_auth_type: RequireAndVerifyClientCert)",
            )
        if c.client_auth_type in _NEEDS_CA and not has_ca:
            raise self.error(
                at("client_auth_type"),
                f"client_auth_type {c.client_auth_type} needs client_ca_file (or client_ca)",
            )
        if c.client_allowed_sans and c.client_auth_type != "RequireAndVerifyClientCert":
            raise self.error(
                at("client_allowed_sans"),
                "client_allowed_sans requires client_auth_type RequireAndVerifyClientCert",
            )

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        low, high = _TLS_VERSIONS[c.min_version], _TLS_VERSIONS[c.max_version]
        legacy = low < ssl.TLSVersion.TLSv1_2
        with warnings.catch_warnings():  # Python deprecates TLS 1.0/1.1; the file asked for them
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = low
            ctx.maximum_version = high
        self.ciphers(ctx, c, legacy, at)
        self.curves(ctx, c, at)
        if c.prefer_server_cipher_suites:
            ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        else:
            ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
        ctx.set_alpn_protocols(["http/1.1"])
        self.cert_chain(ctx, c, at)
        if has_ca:
            self.client_ca(ctx, c, at)
        ctx.verify_mode = _VERIFY_MODES[c.client_auth_type]
        return ctx

    def ciphers(
        self, ctx: ssl.SSLContext, c: TLSServerConfig, legacy: bool, at: Callable[[str], yaml.Node]
    ) -> None:
        names = [GO_TLS12_CIPHERS[n] for n in c.cipher_suites if n in GO_TLS12_CIPHERS]
        if c.cipher_suites and not names and c.min_version != "TLS13":
            raise self.error(
                at("cipher_suites"),
                "cipher_suites lists only TLS 1.3 suites, which cannot be configured (Go ignores"
                " them too), so TLS 1.2 would have no cipher; add a TLS 1.2 suite or set"
                " min_version: TLS13",
            )
        for go_name, name in zip(
            [n for n in c.cipher_suites if n in GO_TLS12_CIPHERS], names, strict=True
        ):
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(name)
            except ssl.SSLError:
                raise self.error(
                    at("cipher_suites"), f"cipher {go_name} is not available in this OpenSSL build"
                ) from None
        if names:
            ctx.set_ciphers(":".join(names) + (":@SECLEVEL=0" if legacy else ""))
        elif legacy:
            ctx.set_ciphers(_LEGACY_CIPHERS)
        else:
            ctx.set_ciphers(DEFAULT_TLS12_CIPHERS)

    def curves(
        self, ctx: ssl.SSLContext, c: TLSServerConfig, at: Callable[[str], yaml.Node]
    ) -> None:
        if not c.curve_preferences:
            return
        names = [GO_CURVES[n] for n in c.curve_preferences]
        set_groups = getattr(ctx, "set_groups", None)  # Python >= 3.15 can set a whole list
        try:
            if set_groups is not None:
                set_groups(":".join(names))
                return
            ctx.set_ecdh_curve(names[0])
        except (ssl.SSLError, ValueError) as err:
            raise self.error(
                at("curve_preferences"), f"curve_preferences: {one_line(str(err))}"
            ) from None
        if len(names) > 1:
            first, *rest = c.curve_preferences
            self.warnings.append(
                f"curve_preferences: this Python's ssl module can set only one curve, so only"
                f" {first} is offered (ignored: {', '.join(rest)})"
            )

    def cert_chain(
        self, ctx: ssl.SSLContext, c: TLSServerConfig, at: Callable[[str], yaml.Node]
    ) -> None:
        cert_key = "cert_file" if c.cert_file else "cert"
        key_key = "key_file" if c.key_file else "key"
        cert_name = c.cert_file or "(inline cert)"
        key_name = c.key_file or "(inline key)"
        cert = self.read(at(cert_key), "cert_file", c.cert_file) if c.cert_file else c.cert.encode()
        key = self.read(at(key_key), "key_file", c.key_file) if c.key_file else c.key.encode()
        if not _PEM_CERT.search(cert):
            raise self.error(at(cert_key), f"{cert_key} {cert_name} contains no PEM certificate")
        if not _PEM_KEY.search(key):
            raise self.error(at(key_key), f"{key_key} {key_name} contains no PEM private key")
        with _pem_paths(cert, key) as (cert_path, key_path):
            try:
                ctx.load_cert_chain(cert_path, key_path, password=_refuse_password)
            except _EncryptedKeyError:
                raise self.error(
                    at(key_key), f"{key_key} {key_name} is encrypted; the key must be unencrypted"
                ) from None
            except ssl.SSLError as err:
                if err.reason == "KEY_VALUES_MISMATCH":
                    message = f"{key_key} {key_name} does not match {cert_key} {cert_name}"
                else:
                    message = (
                        f"cannot load {cert_key} {cert_name} with {key_key} {key_name}:"
                        f" {_ssl_reason(err)}"
                    )
                raise self.error(at(key_key), message) from None

    def client_ca(
        self, ctx: ssl.SSLContext, c: TLSServerConfig, at: Callable[[str], yaml.Node]
    ) -> None:
        name = "client_ca_file" if c.client_ca_file else "client_ca"
        label = c.client_ca_file or "(inline)"
        data = (
            self.read(at(name), name, c.client_ca_file)
            if c.client_ca_file
            else c.client_ca.encode()
        )
        if not _PEM_CERT.search(data):
            raise self.error(at(name), f"{name} {label} contains no PEM certificate")
        try:
            ctx.load_verify_locations(cadata=data.decode("ascii", "replace"))
        except (ssl.SSLError, ValueError) as err:
            raise self.error(at(name), f"cannot load {name} {label}: {_ssl_reason(err)}") from None


class _EncryptedKeyError(Exception):
    """Raised from the key password callback so OpenSSL never prompts on the terminal."""


def _refuse_password() -> str:
    raise _EncryptedKeyError


def _ssl_reason(err: Exception) -> str:
    reason = getattr(err, "reason", None)
    return one_line(str(reason).replace("_", " ").lower() if reason else str(err))


@contextlib.contextmanager
def _pem_paths(*blobs: bytes) -> Iterator[list[str]]:
    """File names holding ``blobs`` for ``load_cert_chain`` (which only takes paths), gone after.

    On Linux the bytes live in anonymous memory files, so an inline key never touches a disk; and
    since what is loaded is exactly what was checked, a file replaced mid-load cannot slip in.
    """
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fds: list[int] = []
        try:
            for blob in blobs:
                fd = os.memfd_create("vgpumon-pem")
                fds.append(fd)
                with open(fd, "wb", closefd=False) as f:
                    f.write(blob)
            yield [f"/proc/self/fd/{fd}" for fd in fds]
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="vgpumon-pem-") as tmp:
        paths = []
        for i, blob in enumerate(blobs):
            p = os.path.join(tmp, f"{i}.pem")
            with open(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(blob)
            paths.append(p)
        yield paths


def _parse_go_duration(text: str) -> float | None:
    """Seconds in a Go ``time.ParseDuration`` string, or None when it is not one (the web-config
    dialect of the one units grammar, :func:`vgpumon.units.parse_go_duration`)."""
    try:
        return parse_go_duration(text)
    except UnitError:
        return None
