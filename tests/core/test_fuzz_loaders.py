"""Fuzzing the three YAML loaders: any file either loads or is refused with one line.

Property (docs/reliability.md): whatever bytes a scenario file, a serve config or a web-config
holds, loading it returns or raises :class:`~vgpumon.errors.ConfigError` with a one-line message,
never any other exception. A scenario that loads must also start the simulator, whose runtime
code divides by and indexes with the values the file gave. 200 inputs per loader in every run;
``pytest -m fuzz`` runs ``VGPUMON_FUZZ_EXAMPLES`` (default 5000) per loader.
"""

from __future__ import annotations

import collections
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from fuzz_strategies import document_inputs, keys_of, one_line_or_loaded
from hypothesis import given, settings

from vgpumon.config.serve import load_file
from vgpumon.errors import ConfigError
from vgpumon.export.webconfig import WebConfig
from vgpumon.sim import builtin_scenarios, create
from vgpumon.sim.scenario import builtin_text

SCENARIOS = [yaml.safe_load(builtin_text(name)) for name in builtin_scenarios()]
# No built-in scenario answers field ids of its own: one base document does.
SCENARIOS.append(
    {
        "name": "field-values",
        "gpus": [
            {"model": "h100-sxm-80gb", "field_values": {94: 7, 250: 12.5, 112: "not_supported"}}
        ],
    }
)
SERVE_CONFIG = {
    "interval": "500ms",
    "deadline": 2,
    "collector": {"pcie": False, "memory": True},
    "process_series": True,
    "process_series_max": 7,
    "pcie_throughput": False,
    "web": {
        "listen_address": ["127.0.0.1:9100", "[::1]:9100"],
        "config": {"file": "web.yml"},
        "max_requests": 3,
        "shutdown_timeout": "2s",
    },
    "sim": "a100-mig-mixed",
    "log": {"level": "debug", "format": "json"},
    "fields": [
        {
            "id": "NVML_FI_DEV_PCIE_REPLAY_COUNTER",
            "name": "vgpumon_gpu_replays_again_total",
            "type": "counter",
            "help": "Replays.",
        },
        {
            "id": 187,
            "name": "vgpumon_gpu_min_limit_watts",
            "type": "gauge",
            "help": "Min.",
            "scale": 0.001,
            "scope_id": 0,
        },
    ],
}
WEB_CONFIG = {
    "basic_auth_users": {"alice": bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()},
    "http_server_config": {
        "http2": True,
        "headers": {"X-Frame-Options": "deny", "Strict-Transport-Security": "max-age=1"},
    },
    "rate_limit": {"interval": "1s", "burst": 5},
    "tls_server_config": {
        "cert_file": "server.crt",
        "key_file": "server.key",
        "client_auth_type": "RequireAndVerifyClientCert",
        "min_version": "TLS12",
    },
}
COLLECTORS = ["device", "memory", "pcie", "utilization"]


def _scenario(path: str) -> Any:
    return create(path)  # parse, check and build the simulated host from the file


LOADERS: dict[str, tuple[list[Any], Callable[[str], Any]]] = {
    "scenario": (SCENARIOS, _scenario),
    "serve config": ([SERVE_CONFIG], lambda path: load_file(path, COLLECTORS)),
    "web config": ([WEB_CONFIG], WebConfig.load),
}


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    """One directory for every example (hypothesis runs many inputs per test function)."""
    with tempfile.TemporaryDirectory(prefix="vgpumon-fuzz-") as name:
        yield Path(name)


def check(loader: str, data: bytes, workdir: Path, tally: collections.Counter[str]) -> None:
    _bases, load = LOADERS[loader]
    path = workdir / "input.yml"
    path.write_bytes(data)
    outcome = one_line_or_loaded(lambda: load(str(path)), ConfigError)
    tally[f"{loader} {outcome}"] += 1


def _property(loader: str) -> Callable[..., None]:
    bases, _load = LOADERS[loader]
    vocabulary = sorted({k for doc in bases for k in keys_of(doc)})

    @given(data=document_inputs(bases, vocabulary))
    def run(data: bytes, workdir: Path, fuzz_tally: collections.Counter[str]) -> None:
        check(loader, data, workdir, fuzz_tally)

    return run


test_scenario_files_load_or_refuse_in_one_line = _property("scenario")
test_serve_config_loads_or_refuses_in_one_line = _property("serve config")
test_web_config_loads_or_refuses_in_one_line = _property("web config")

_LONG = settings(settings.get_profile("fuzz"))
test_scenario_files_long = pytest.mark.fuzz(_LONG(_property("scenario")))
test_serve_config_long = pytest.mark.fuzz(_LONG(_property("serve config")))
test_web_config_long = pytest.mark.fuzz(_LONG(_property("web config")))
