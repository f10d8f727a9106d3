"""Python constants that restate a C constant equal it: roles, placements, capability
names, register-memory states, link paths and element sizes.

The Python enums are written out (readers and type checkers see the members, and the
vendor-compatible ones must keep the vendor's names); these tests are what keeps each
one equal to the header or to the mock's C table it restates.
"""
from __future__ import annotations

import re
from pathlib import Path

from llm_datadist_ffi._core import _capi
from llm_datadist_ffi._vendor import configs
from llm_datadist_ffi import mock_control, native
from llm_datadist_ffi.data_type import ELEMENT_BITS, GeDataType
from llm_datadist_ffi._vendor.v2 import llm_types

REPO = Path(__file__).resolve().parents[2]


def members(enum_class: type) -> dict[str, int]:
    return {member.name: int(member.value) for member in enum_class}  # type: ignore[attr-defined]


def test_the_header_constants_are_found_by_prefix() -> None:
    # A prefix that matched nothing would make every comparison below vacuous.
    assert _capi.constants("LLDD_ROLE_") == {"PROMPT": 1, "DECODER": 2, "MIX": 3}
    assert _capi.constants("LLDD_PLACEMENT_") == {"HOST": 0, "DEVICE": 1}


def test_both_role_enums_are_the_header_roles() -> None:
    roles = _capi.constants("LLDD_ROLE_")
    assert members(native.LlmRole) == roles
    assert members(configs.LLMRole) == roles


def test_both_placement_enums_are_the_header_placements() -> None:
    placements = _capi.constants("LLDD_PLACEMENT_")
    assert members(native.CachePlacement) == placements
    assert members(llm_types.Placement) == placements


def test_the_register_memory_states_are_the_header_states() -> None:
    assert members(llm_types.RegisterMemStatus) == _capi.constants("LLDD_REGISTER_MEM_")
    assert len(llm_types.RegisterMemStatus) == 3


def test_the_capability_names_are_the_header_flags_in_bit_order() -> None:
    assert list(native.capabilities()) == ["register", "allocate", "copy", "cross_process", "mock_control",
                                           "ext_keys"]
    flags = _capi.constants("LLDD_CAP_")
    assert sorted(flags.values()) == [1 << bit for bit in range(len(flags))]


def test_the_link_path_names_cover_the_header_paths() -> None:
    paths = _capi.constants("LLDD_MOCK_PATH_")
    assert mock_control.LINK_PATHS == {
        paths["NONE"]: "none", paths["SAME_PROCESS"]: "same-process",
        paths["PROCESS_VM"]: "process_vm", paths["SOCKET"]: "socket", paths["SHARED"]: "shared",
    }
    assert len(paths) == 5


# The mock's element sizes: one row per ge::DataType value, "/* 27 DT_BF16 */ 16,".
DTYPE_ROW = re.compile(r"/\*\s*(\d+)\s+(\S+(?: \S+)?)\s*\*/\s*(\d+),")


def mock_element_bits() -> list[tuple[int, str, int]]:
    text = (REPO / "mock_libs" / "base" / "dtype.c").read_text(encoding="utf-8")
    return [(int(value), name, int(bits)) for value, name, bits in DTYPE_ROW.findall(text)]


def test_the_mock_table_has_one_row_per_value_in_order() -> None:
    rows = mock_element_bits()
    assert [value for value, _, _ in rows] == list(range(44))


def test_the_python_element_sizes_are_the_mock_element_sizes() -> None:
    # 0 bits in the C table marks a type the core rejects; Python leaves it out.
    from_c = {value: bits for value, _, bits in mock_element_bits() if bits != 0}
    assert ELEMENT_BITS == from_c
    assert {5, 28, 43}.isdisjoint(ELEMENT_BITS)


def test_each_row_of_the_mock_table_names_the_ge_data_type_of_its_value() -> None:
    for value, name, _ in mock_element_bits():
        if name != "(reserved)":
            assert GeDataType[name] == value, name
    assert 5 not in set(GeDataType)
