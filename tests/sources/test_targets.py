"""Targets files (a plain list, Prometheus file_sd JSON/YAML) and where passwords come from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vgpumon import yamlfile
from vgpumon.errors import ConfigError
from vgpumon.sources.targets import load_targets, password_from


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_plain_list_with_comments(tmp_path: Path):
    path = write(
        tmp_path,
        "hosts.txt",
        "# rack 3\n\ngpu1:9400\n  https://gpu2:9443/metrics  # TLS one\n[::1]:9400\n",
    )
    targets = load_targets(path)
    assert [t.base_url for t in targets] == [
        "http://gpu1:9400",
        "https://gpu2:9443",
        "http://[::1]:9400",
    ]
    assert [t.host for t in targets] == ["gpu1:9400", "gpu2:9443", "[::1]:9400"]
    assert all(t.name is None for t in targets)


def test_file_sd_json_with_scheme_and_name_labels(tmp_path: Path):
    groups = [
        {"targets": ["gpu1:9400", "gpu2:9400"], "labels": {"job": "vgpumon"}},
        {"targets": ["gpu3:9443"], "labels": {"__scheme__": "https", "instance": "rack-3"}},
        {"targets": ["gpu4:9400"], "labels": {"host": "h4", "instance": "ignored"}},
        {"targets": []},
    ]
    path = write(tmp_path, "sd.json", json.dumps(groups))
    targets = load_targets(path)
    assert [(t.base_url, t.host) for t in targets] == [
        ("http://gpu1:9400", "gpu1:9400"),
        ("http://gpu2:9400", "gpu2:9400"),
        ("https://gpu3:9443", "rack-3"),
        ("http://gpu4:9400", "h4"),
    ]


def test_file_sd_yaml(tmp_path: Path):
    path = write(
        tmp_path,
        "sd.yml",
        "# from the Prometheus config\n"
        "- targets: ['gpu1:9400']\n"
        "  labels:\n    __scheme__: https\n"
        "- targets:\n    - gpu2:9400\n",
    )
    assert [t.base_url for t in load_targets(path)] == ["https://gpu1:9400", "http://gpu2:9400"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "names no targets"),
        ("# only a comment\n", "names no targets"),
        ("gpu1\n", "line 1: 'gpu1' has no port: give HOST:PORT"),
        ("gpu1:9400\nftp://gpu2:21\n", "line 2: 'ftp://gpu2:21' is neither HOST:PORT nor"),
        ("gpu1:9400\ngpu1:9400\n", "host 'gpu1:9400' is named twice"),
        ("gpu1:notaport\n", "line 1: 'gpu1:notaport' has no port"),
        ("[{targets: [gpu1:9400]\n", "line 2: "),
        ('{"targets": ["gpu1:9400"]}', "a file_sd file is a list"),
        ("targets: [gpu1:9400]\n", "a file_sd file is a list"),
        ('[{"target": ["gpu1:9400"]}]', "group 1: unknown key 'target'"),
        ('[{"targets": "gpu1:9400"}]', "group 1: 'targets' must be a list"),
        ('[{"targets": ["gpu1:9400"], "labels": {"a": 1}}]', "group 1: 'labels' must map"),
        ('[{"targets": ["a:1"], "labels": {"__scheme__": "ftp"}}]', "__scheme__ must be http"),
        (
            '[{"targets": ["a:1", "b:1"], "labels": {"instance": "x"}}]',
            "label 'x' would name 2 targets alike",
        ),
        ("[1]", "group 1: expected a mapping"),
        ('[{"targets": ["a"]}]', "group 1: 'a' has no port"),
    ],
)
def test_bad_files_are_one_line_naming_the_file(tmp_path: Path, text: str, message: str):
    path = write(tmp_path, "targets", text)
    with pytest.raises(ConfigError) as err:
        load_targets(path)
    assert str(err.value).startswith(path), err.value
    assert message in str(err.value), err.value
    assert "\n" not in str(err.value)


def test_unreadable_files(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"cannot read targets file .*nope\.txt"):
        load_targets(str(tmp_path / "nope.txt"))
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"gpu\xe9:9400\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_targets(str(path))


def test_password_from_a_file_or_the_environment(tmp_path: Path, monkeypatch):
    assert password_from(None, None) is None
    path = write(tmp_path, "pw", "s3cret\n")
    assert password_from(path, None) == "s3cret"
    monkeypatch.setenv("VGPUMON_TEST_PASSWORD", "from-env")
    assert password_from(None, "VGPUMON_TEST_PASSWORD") == "from-env"
    monkeypatch.delenv("VGPUMON_TEST_PASSWORD")
    with pytest.raises(ConfigError, match=r"VGPUMON_TEST_PASSWORD .* is not set"):
        password_from(None, "VGPUMON_TEST_PASSWORD")
    with pytest.raises(ConfigError, match="not both"):
        password_from(path, "VGPUMON_TEST_PASSWORD")
    with pytest.raises(ConfigError, match="cannot read password file"):
        password_from(str(tmp_path / "missing"), None)
    with pytest.raises(ConfigError, match="is empty"):
        password_from(write(tmp_path, "empty", "\n"), None)


def test_targets_files_go_through_the_hardened_loader(tmp_path: Path):
    """Duplicate keys are refused (not the last one silently kept), and the size is capped."""
    path = write(tmp_path, "dup.yaml", '[{"targets": ["a:1"], "targets": ["b:1"]}]')
    with pytest.raises(ConfigError, match="targets"):
        load_targets(path)
    big = tmp_path / "big.txt"
    big.write_text("gpu1:9400\n" * (yamlfile.CONFIG_MAX_BYTES // 10 + 1), encoding="utf-8")
    with pytest.raises(ConfigError, match="more than"):
        load_targets(str(big))
