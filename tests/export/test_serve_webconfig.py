"""`vgpumon serve --web.config.file`: the exporter serves over TLS and asks for basic auth."""

from __future__ import annotations

import base64
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
import trustme
from export_helpers import free_port

PASSWORD = "s3cret-scraper"


def fetch(url: str, context: ssl.SSLContext, auth: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_tls_and_basic_auth(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.crt"))
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    (tmp_path / "web.yml").write_text(
        "tls_server_config:\n"
        f"  cert_file: {tmp_path / 'server.crt'}\n"
        f"  key_file: {tmp_path / 'server.key'}\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vgpumon.cli",
            "serve",
            "--sim",
            "passthrough-guest",
            "--web.listen-address",
            f"127.0.0.1:{port}",
            "--web.config.file",
            str(tmp_path / "web.yml"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    client = ssl.create_default_context()
    ca.configure_trust(client)
    base = f"https://127.0.0.1:{port}"
    try:
        give_up = time.monotonic() + 20
        while True:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                status, _ = fetch(f"{base}/-/ready", client, f"prometheus:{PASSWORD}")
                if status == 200:
                    break
            except (OSError, urllib.error.URLError):
                pass
            assert time.monotonic() < give_up, "the TLS exporter never became ready"
            time.sleep(0.1)
        assert fetch(f"{base}/metrics", client)[0] == 401
        assert fetch(f"{base}/metrics", client, "prometheus:wrong")[0] == 401
        status, body = fetch(f"{base}/metrics", client, f"prometheus:{PASSWORD}")
        assert status == 200 and "vgpumon_gpu_up" in body
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP refused
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bad_web_config_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "web.yml").write_text("tls_server_config:\n  certfile: x\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vgpumon.cli",
            "serve",
            "--sim",
            "passthrough-guest",
            "--web.listen-address",
            "127.0.0.1:0",
            "--web.config.file",
            str(tmp_path / "web.yml"),
        ],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode != 0
    err = result.stderr.decode()
    assert err.count("\n") == 1 and "certfile" in err, err
