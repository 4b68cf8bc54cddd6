"""Bad files for the three YAML loaders: every one a one-line ConfigError, none a crash or a hang.

Each case here was reproduced as a traceback, a hang or a silent wrong value before the shared
hardened loader (vgpumon/yamlfile.py) existed; docs/reliability.md lists them with these tests.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vgpumon import yamlfile
from vgpumon.config.serve import load_file
from vgpumon.errors import ConfigError
from vgpumon.export.webconfig import WebConfig
from vgpumon.sim import load_scenario

COLLECTORS = ["device", "memory"]

LOADERS: dict[str, Callable[[str], Any]] = {
    "scenario": load_scenario,
    "serve config": lambda path: load_file(path, COLLECTORS),
    "web config": WebConfig.load,
}

# A hang before the fix must fail the test, not the suite: the load runs in a daemon thread and the
# test gives up after this long (a fixed load answers in milliseconds; no timing is asserted).
HANG_GUARD_SECONDS = 60


def refusal(load: Callable[[str], Any], path: str) -> str:
    """The one-line message ``load(path)`` refuses with, or a failed test (crash, hang, success)."""
    outcome: dict[str, BaseException | object] = {}

    def attempt() -> None:
        try:
            outcome["value"] = load(path)
        except BaseException as err:  # noqa: BLE001 - the test reports whatever escaped
            outcome["error"] = err

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(HANG_GUARD_SECONDS)
    assert not worker.is_alive(), f"loading {path} hung"
    error = outcome.get("error")
    assert isinstance(error, ConfigError), f"expected a ConfigError, got {outcome!r}"
    message = str(error)
    assert "\n" not in message and message
    return message


@pytest.fixture(params=sorted(LOADERS))
def loader(request: pytest.FixtureRequest) -> Callable[[str], Any]:
    return LOADERS[request.param]


def test_fifo_is_refused_by_name_not_read(tmp_path: Path, loader: Callable[[str], Any]) -> None:
    fifo = tmp_path / "config.yml"
    os.mkfifo(fifo)
    assert "FIFO" in refusal(loader, str(fifo))


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_devices_are_refused(loader: Callable[[str], Any], device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"{device} is absent here")
    assert "character device" in refusal(loader, device)


def test_directory_is_refused(tmp_path: Path, loader: Callable[[str], Any]) -> None:
    assert "a directory" in refusal(loader, str(tmp_path))


def test_nul_byte_in_path(tmp_path: Path, loader: Callable[[str], Any]) -> None:
    assert "NUL byte" in refusal(loader, f"{tmp_path}/a\0b.yml")


def test_binary_file_names_line_and_column(tmp_path: Path, loader: Callable[[str], Any]) -> None:
    path = tmp_path / "bad.yml"
    path.write_bytes(b"# fine\nkey: \xff\xfe\x00binary\n")
    message = refusal(loader, str(path))
    assert "line 2 column 6: not UTF-8 text" in message


def test_deep_nesting_is_refused_before_recursion(
    tmp_path: Path, loader: Callable[[str], Any]
) -> None:
    path = tmp_path / "deep.yml"
    path.write_text("a: " + "[" * 500 + "]" * 500 + "\n")
    assert f"nested more than {yamlfile.MAX_DEPTH} levels deep" in refusal(loader, str(path))
    path.write_text("".join(f"{'  ' * i}k{i}:\n" for i in range(500)))
    assert "nested more than" in refusal(loader, str(path))


def test_oversized_file_is_refused_without_parsing(
    tmp_path: Path, loader: Callable[[str], Any]
) -> None:
    path = tmp_path / "big.yml"
    line = b"# " + b"x" * 1021 + b"\n"
    with path.open("wb") as f:
        for _ in range(30 * 1024):  # 30 MiB of comments
            f.write(line)
    assert "more than" in refusal(loader, str(path))


def test_alias_bomb_and_self_reference(tmp_path: Path, loader: Callable[[str], Any]) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    path = tmp_path / "laughs.yml"
    path.write_text("\n".join(lines) + "\n")
    assert "expands to more than" in refusal(loader, str(path))
    path.write_text("a: &loop [*loop]\n")
    message = refusal(loader, str(path))
    assert "refers to its own anchor" in message or "invalid YAML" in message


def test_lone_surrogate_text_is_refused(tmp_path: Path, loader: Callable[[str], Any]) -> None:
    # Was a UnicodeEncodeError at the first request when it named a web-config user.
    path = tmp_path / "surrogate.yml"
    path.write_text('x: "\\ud800"\n')
    assert "line 1: not valid Unicode text" in refusal(loader, str(path))


def test_duplicate_keys_name_the_path(tmp_path: Path) -> None:
    path = tmp_path / "dup.yml"
    path.write_text("a:\n  b: 1\n  b: 2\n")
    with pytest.raises(ConfigError, match=re.escape('line 3: a.b: duplicate key "b" in a')):
        yamlfile.load_node(str(path), "config file")


def test_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "merge.yml"
    path.write_text("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  x: 3\n")
    root = yamlfile.load_node(str(path), "config file")
    assert root is not None
    use = yamlfile.mapping(yamlfile.mapping(root, "f", "top", None)["use"][1], "f", "use", None)
    assert {k: v[1].value for k, v in use.items()} == {"x": "3", "y": "2"}


def test_tls_key_file_fifo_is_refused(tmp_path: Path) -> None:
    # A FIFO named as the TLS key hung the loader (and, reloaded on the event loop, every request).
    fifo = tmp_path / "server.key"
    os.mkfifo(fifo)
    config = tmp_path / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {fifo}\n  key_file: {fifo}\n")
    message = refusal(WebConfig.load, str(config))
    assert "line 2" in message and "FIFO" in message


def test_read_text_caps_and_regular_files(tmp_path: Path) -> None:
    path = tmp_path / "ok.yml"
    path.write_text("a: 1\n")
    assert yamlfile.read_text(str(path), "config file", max_bytes=5) == "a: 1\n"
    with pytest.raises(ConfigError, match="more than 4"):
        yamlfile.read_text(str(path), "config file", max_bytes=4)
    with pytest.raises(ConfigError, match="cannot read config file"):
        yamlfile.read_text(str(tmp_path / "absent"), "config file")


def test_fifo_renamed_over_the_tls_key_keeps_the_running_config(tmp_path: Path) -> None:
    # Before: the reload opened the FIFO and blocked (on the event loop: every request hung).
    import trustme

    from vgpumon.export.webconfig_runtime import WebConfigRuntime

    leaf = trustme.CA().issue_cert("127.0.0.1")
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "server.crt"))
    leaf.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    runtime = WebConfigRuntime(str(config), check_interval=0.0)
    try:
        before = runtime.config.tls_context
        assert before is not None
        os.remove(tmp_path / "server.key")
        os.mkfifo(tmp_path / "server.key")
        outcome: list[bool] = []
        worker = threading.Thread(
            target=lambda: outcome.append(runtime.check_for_changes(force=True)), daemon=True
        )
        worker.start()
        worker.join(HANG_GUARD_SECONDS)
        assert not worker.is_alive(), "the reload hung on the FIFO"
        assert outcome == [False], "a bad key file keeps the previous config"
        assert runtime.config.tls_context is before
    finally:
        runtime.close()
