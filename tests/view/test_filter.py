"""The filter grammar: field terms, free words, quoting, and one-line errors."""

from __future__ import annotations

import pytest

from vgpumon.errors import ConfigError
from vgpumon.view.filter import Query, parse


def test_terms_and_words() -> None:
    q = parse('vm:render license:unlicensed type:L40S mode:mig "big box"')
    assert q.terms == (
        ("vm", "render"), ("license", "unlicensed"), ("type", "l40s"), ("mode", "mig"),
    )  # fmt: skip
    assert q.words == ("big box",)
    assert parse("").empty and parse("   ").empty


def test_matching_is_substring_case_insensitive_and_all_terms_hold() -> None:
    row = {"vm": "Render-Farm-07", "type": "NVIDIA L40S-8Q", "license": "unlicensed_restricted"}
    assert parse("vm:render").matches(row)
    assert parse("vm:render type:l40s license:unlicensed").matches(row)
    assert not parse("vm:render type:a100").matches(row)
    assert parse("farm").matches(row) and not parse("farm nothere").matches(row)
    assert not parse("mode:mig").matches(row)  # a field the row lacks never matches
    assert Query().matches(row)


def test_round_trip_text() -> None:
    q = parse('vm:"my vm" gpu:0 word')
    assert parse(str(q)) == q


@pytest.mark.parametrize("text", ["colour:red", 'vm:"open'])
def test_bad_query_is_one_config_error(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(text)
    assert "\n" not in str(err.value) and str(err.value).startswith("filter:")


def test_fits_names_a_whole_type_not_part_of_one() -> None:
    """fits:TYPE matches a name in the row's fits list exactly: L40S-8Q is not L40S-48Q."""
    room_for_48q = {"fits": "nvidia l40s-48q,l40s-48q"}
    room_for_8q = {"fits": "nvidia l40s-8q,l40s-8q,1g.10gb"}
    assert not parse("fits:l40s-8q").matches(room_for_48q)
    assert parse("fits:L40S-8Q").matches(room_for_8q)
    assert parse('fits:"NVIDIA L40S-8Q"').matches(room_for_8q)
    assert parse("fits:1g.10gb fits:l40s-8q").matches(room_for_8q)
    assert not parse("fits:8q").matches(room_for_8q)
    assert not parse("fits:l40s-8q").matches({"type": "NVIDIA L40S-8Q"})  # no room listed


def test_values_and_without_split_off_one_field() -> None:
    q = parse("fits:l40s-8q host:kvm word")
    assert q.values("fits") == ("l40s-8q",)
    assert q.without("fits") == parse("host:kvm word")
