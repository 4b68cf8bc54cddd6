"""Prometheus exporter-toolkit ``web-config.yml`` for ``vgpumon serve``: TLS, basic auth, headers.

Operators already write this file for node_exporter and friends (``--web.config.file``), so
vgpumon reads the same keys with the same defaults and the same validation, and refuses what it
cannot honour instead of silently doing something weaker. Where Go's ``crypto/tls`` and Python's
``ssl`` differ, the mapping (and every refusal) is documented in docs/web-config.md.

Three modules, one concern each:

* this one: :class:`WebConfig` is one parsed, checked file, read through :mod:`vgpumon.yamlfile`
  (size, encoding, depth, aliases, duplicate and unknown keys, the line of every error); every
  referenced certificate, key and CA is loaded into an ``ssl.SSLContext`` while parsing, so a bad
  file fails at start with a one-line :class:`~vgpumon.errors.ConfigError` naming the key and
  its line;
* :mod:`vgpumon.export.webconfig_tls`: how ``tls_server_config`` maps onto Python's ``ssl``;
* :class:`~vgpumon.export.webconfig_runtime.WebConfigRuntime` (a module of its own) owns the
  current config and re-reads it (and the cert/key/CA files) when they change, at most once per
  ``check_interval``. New TLS connections are made by the newest good context, so rotated
  certificates apply without a restart; a bad file keeps the previous config.
"""

from __future__ import annotations

import logging
import os
import ssl
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import yaml

from vgpumon import yamlfile
from vgpumon.errors import ConfigError, one_line
from vgpumon.export.auth import bcrypt_hash_error
from vgpumon.export.webconfig_tls import (
    CLIENT_AUTH_ALIASES,
    CLIENT_AUTH_TYPES,
    GO_CURVES,
    GO_INSECURE_CIPHERS,
    GO_TLS12_CIPHERS,
    GO_TLS13_CIPHERS,
    TLS_VERSIONS,
    TlsContextBuilder,
    TLSServerConfig,
)
from vgpumon.units import UnitError, parse_go_duration

log = logging.getLogger(__name__)

_TAG = yamlfile.TAG

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

Stamp = tuple[int, int, int, int, int]


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


def _mode(path: str) -> int:
    """The permission bits of ``path`` (0 when it cannot be read: the read says why)."""
    try:
        return os.stat(path).st_mode
    except OSError:
        return 0


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
        where = self.path if node is None else f"{self.path} line {yamlfile.line(node)}"
        return ConfigError(f"web config {where}: {one_line(message)}")

    _is_null = staticmethod(yamlfile.is_null)

    def mapping(
        self, node: yaml.Node, where: str, allowed: Sequence[str] | None
    ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """Keys of a mapping node (null is empty); unknown and duplicate keys are errors, as
        yaml.UnmarshalStrict makes them: the shared walker of :mod:`vgpumon.yamlfile`."""
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
        if key == "key_file" and _mode(path) & stat.S_IROTH:
            self.warnings.append(
                f"the TLS key {path} is readable by every user of this host: anyone on it can "
                "pose as this exporter (chmod o-r)"
            )
        try:
            return yamlfile.read_bytes(path, key)
        except ConfigError as err:
            raise self.error(node, str(err)) from None

    # -- the file -------------------------------------------------------------------------------

    def load(self) -> WebConfig:
        path = os.path.abspath(yamlfile.check_path(self.path, "web config"))
        self.stamps.append((path, file_stamp(path)))
        if _mode(path) & stat.S_IWOTH:
            self.warnings.append(
                f"{path} is writable by every user of this host: anyone on it can change who "
                "may log in and which certificate is served (chmod o-w)"
            )
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
            if value not in TLS_VERSIONS:
                raise self.error(
                    at(name),
                    f"unknown TLS version: {value} (expected one of {', '.join(TLS_VERSIONS)})",
                )
            versions[name] = value
        if TLS_VERSIONS[versions["min_version"]] > TLS_VERSIONS[versions["max_version"]]:
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
                hint = " (Go lists it as insecure)" if name in GO_INSECURE_CIPHERS else ""
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
        auth_type = CLIENT_AUTH_ALIASES.get(auth_type, auth_type)
        if auth_type not in CLIENT_AUTH_TYPES:
            raise self.error(
                at("client_auth_type"),
                f'invalid client_auth_type "{auth_type}"'
                f" (expected one of {', '.join(CLIENT_AUTH_TYPES)})",
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
        return config, TlsContextBuilder(self.error, self.read, self.warnings).build(config, at)


def _parse_go_duration(text: str) -> float | None:
    """Seconds in a Go ``time.ParseDuration`` string, or None when it is not one (the web-config
    dialect of the one units grammar, :func:`vgpumon.units.parse_go_duration`)."""
    try:
        return parse_go_duration(text)
    except UnitError:
        return None
