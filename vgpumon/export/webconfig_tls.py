"""How a web config's ``tls_server_config`` maps onto Python's ``ssl``: names, defaults, checks.

Go's ``crypto/tls`` (the exporter toolkit's) and OpenSSL name versions, suites and curves
differently and refuse different things; docs/web-config.md has the mapping and every refusal.
:class:`TlsContextBuilder` turns a parsed :class:`TLSServerConfig` into an ``ssl.SSLContext``,
loading every certificate, key and CA, so a bad file fails at start with one line naming the key
and its line (the errors are made by the web config's loader, :mod:`vgpumon.export.webconfig`).
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import yaml

from vgpumon.errors import ConfigError, one_line

CLIENT_AUTH_TYPES = (
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
)
CLIENT_AUTH_ALIASES = {"": "NoClientCert", "RequireClientCert": "RequireAnyClientCert"}
NEEDS_CA = ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
# RequestClientCert asks for a certificate and ignores it; Python cannot accept a certificate
# without verifying it, and vgpumon never reads an unverified one, so it is NoClientCert here.
VERIFY_MODES = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}

TLS_VERSIONS = {
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
GO_INSECURE_CIPHERS = (
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
LEGACY_CIPHERS = "@SECLEVEL=0:ECDH+AESGCM:ECDH+CHACHA20:ECDH+AES:!aNULL:!eNULL:!aDSS:!AESCCM"

X25519 = "X25519"
GO_CURVES: Mapping[str, str] = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}

_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----")
_PEM_KEY = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")


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


class TlsContextBuilder:
    """Builds the ``ssl.SSLContext`` of one ``tls_server_config``.

    ``error(node, message)`` makes the loader's one-line error pointing at ``node``; ``read(node,
    key, path)`` reads a certificate, key or CA file as the loader reads files; ``warnings``
    collects settings honoured only approximately.
    """

    def __init__(
        self,
        error: Callable[[yaml.Node | None, str], ConfigError],
        read: Callable[[yaml.Node, str, str], bytes],
        warnings: list[str],
    ) -> None:
        self.error = error
        self.read = read
        self.warnings = warnings

    def build(self, c: TLSServerConfig, at: Callable[[str], yaml.Node]) -> ssl.SSLContext:
        """The context for ``c``; ``at(key)`` is the node an error about ``key`` points at."""
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
        if c.client_auth_type in NEEDS_CA and not has_ca:
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
        low, high = TLS_VERSIONS[c.min_version], TLS_VERSIONS[c.max_version]
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
        ctx.verify_mode = VERIFY_MODES[c.client_auth_type]
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
            ctx.set_ciphers(LEGACY_CIPHERS)
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
            if names[0] == X25519:
                # Some Pythons' set_ecdh_curve takes only elliptic curves of the EC_KEY kind
                # (Debian 12's 3.11.2: "unknown group"), not X25519. OpenSSL's own default
                # groups put X25519 first, so they keep the preference; said, not refused.
                self.warnings.append(
                    "curve_preferences: this Python's ssl module cannot offer X25519 alone, so "
                    "OpenSSL's default groups are offered, X25519 first"
                )
                return
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
