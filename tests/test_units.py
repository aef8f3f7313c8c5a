import pytest

from archsim.errors import ConfigError
from archsim.units import ns_to_cycles, parse_cycles, parse_pin_rate_gbps, parse_size_bytes, parse_time_ns

pytestmark = pytest.mark.unit


def test_ns_to_cycles_rounds_up_never_down():
    assert ns_to_cycles(30.0, 0.625) == 48  # exact: no float noise may push it to 49
    assert ns_to_cycles(13.75, 0.625) == 22
    assert ns_to_cycles(13.76, 0.625) == 23
    assert ns_to_cycles(14.0, 0.625) == 23  # 22.4 -> 23
    assert ns_to_cycles(0.0, 1.0) == 0


def test_parse_cycles_accepts_cycles_and_durations():
    assert parse_cycles(23, 0.625) == 23
    assert parse_cycles("23nCK", 0.625) == 23
    assert parse_cycles("3.9us", 0.625) == 6240
    assert parse_cycles("350ns", 0.625) == 560


@pytest.mark.parametrize("text,expected", [("64KiB", 65536), ("16GiB", 16 * 2**30), ("8Gb", 2**30), ("32B", 32)])
def test_sizes(text, expected):
    assert parse_size_bytes(text) == expected


def test_rates_and_times():
    assert parse_pin_rate_gbps("6.4Gbps") == pytest.approx(6.4)
    assert parse_time_ns("1.5us") == pytest.approx(1500.0)


@pytest.mark.parametrize("bad", ["14 parsecs", "fast", "-3ns", True, [1]])
def test_bad_units_name_the_path(bad):
    with pytest.raises(ConfigError) as info:
        parse_time_ns(bad, "memory.timing.tRP")
    assert "memory.timing.tRP" in str(info.value)
