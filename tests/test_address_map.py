import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.dram.address_map import Decoded, mapping_from_string
from archsim.errors import ConfigError
from tests.conftest import PRESETS, config

pytestmark = pytest.mark.unit

SCHEMES = ("rorabgbachco", "rochrababgco", "RoBaRaCoCh", "ChRaBaRoCo", "rorabacobgpcch")


def _scheme_for(preset: str, scheme: str) -> str | None:
    org = config(preset).organization
    if org.pseudo_channels > 1 and "pc" not in scheme.lower():
        return scheme + ("pc" if scheme.islower() else "Pc")
    return scheme


@settings(max_examples=25, deadline=None)
@given(preset=st.sampled_from(PRESETS), scheme=st.sampled_from(SCHEMES),
       xor=st.sampled_from([(), ("ba",), ("ba", "ch")]), seed=st.integers(0, 2**32 - 1))
def test_decode_encode_round_trip(preset, scheme, xor, seed):
    org = config(preset).organization
    if preset == "HBM3E" and not scheme.lower().startswith("ro"):
        return  # 24576 rows is not a power of two: the row must be the top field
    mapping = mapping_from_string(_scheme_for(preset, scheme), org, xor)
    rng = np.random.default_rng(seed)
    address = (rng.integers(0, org.capacity_bytes // org.access_bytes, 500) * org.access_bytes).astype(np.uint64)
    decoded = mapping.decode(address)
    assert np.array_equal(mapping.encode(decoded), address)
    assert decoded.row.max() < org.rows and decoded.channel.max() < org.n_channels
    assert decoded.bank.max() < org.banks_per_group and decoded.bankgroup.max() < org.bankgroups


def test_dramsim3_field_positions(dramsim3_ini):
    from archsim.config.dramsim3_import import import_dramsim3
    from archsim.config.memory import build_memory_config

    cfg = build_memory_config(import_dramsim3(dramsim3_ini).tree, str(dramsim3_ini))
    one = {"column": 1 << 6, "channel": 1 << 11, "bank": 1 << 14, "bankgroup": 1 << 16, "row": 1 << 18}
    for field, address in one.items():
        decoded = cfg.mapping.decode(np.array([address], dtype=np.uint64))
        values = {name: int(getattr(decoded, name)[0]) for name in one}
        assert values == {name: int(name == field) for name in one}, field


def test_explicit_bits_and_xor():
    org = config("HBM2").organization
    from archsim.dram.address_map import parse_address_mapping
    from archsim.section import Section

    bits = ["ch", "ch", "ch", "co", "co", "co", "co", "co", "bg", "bg", "ba", "ba"]
    mapping = parse_address_mapping(Section({"bits": bits, "xor": ["ba"]}, "memory.address_mapping", None), org)
    decoded = Decoded(*(np.array([v]) for v in (5, 0, 0, 2, 3, 1234, 17)))
    address = mapping.encode(decoded)
    again = mapping.decode(address)
    assert (int(again.channel[0]), int(again.bank[0]), int(again.row[0]), int(again.column[0])) == (5, 3, 1234, 17)


@pytest.mark.parametrize("scheme", ["rorabgbach", "rorabgbachcoxx", "RoBaRa", "rorabgbachcoco"])
def test_mapping_that_does_not_cover_the_bits_is_an_error(scheme):
    with pytest.raises(ConfigError):
        mapping_from_string(scheme, config("HBM2").organization)
