"""The vendor's numbers the oracle speaks in: status codes, roles, cache placements
and data types, written out here by hand from the vendor's tables.

The oracle imports nothing from ``llm_datadist_ffi``; these enums stand in for the
package's. Their members are ints, so an outcome compares equal to the package's
``LLMStatusCode`` member of the same code, and a role or placement the tests pass in
as the package's member compares equal to the one named here.
``tests/tools/test_oracle_independence.py`` checks that no oracle module imports the
package, and compares every value here with the package's as a guard against typos.
"""
from __future__ import annotations

from enum import IntEnum


class LLMStatusCode(IntEnum):
    """The codes the oracle's outcomes carry (the vendor's values; ``LLM_FAILED`` is the
    unsigned form of -1, as Python sees it)."""

    LLM_SUCCESS = 0x00000000
    LLM_KV_CACHE_NOT_EXIST = 0x5010B002
    LLM_REPEAT_REQUEST = 0x5010B003
    LLM_PARAM_INVALID = 0x5010B005
    LLM_NOT_YET_LINK = 0x5010B007
    LLM_ALREADY_LINK = 0x5010B008
    LLM_LINK_FAILED = 0x5010B009
    LLM_UNLINK_FAILED = 0x5010B00A
    LLM_CLUSTER_NUM_EXCEED_LIMIT = 0x5010B00C
    LLM_DEVICE_OUT_OF_MEMORY = 0x5010B00E
    LLM_EXIST_LINK = 0x5010B018
    LLM_FEATURE_NOT_ENABLED = 0x5010B019
    LLM_TIMEOUT = 0x5010B01A
    LLM_OUT_OF_MEMORY = 0x5010B01C
    LLM_FAILED = 0xFFFFFFFF

    def __str__(self) -> str:
        return f"LLMStatusCode.{self.name}"


class Role(IntEnum):
    """An engine's role (``LlmRole`` of the C++ API, ``LLMRole`` of the Python API)."""

    PROMPT = 1
    DECODER = 2
    MIX = 3


class Placement(IntEnum):
    """Where a cache lives (``CachePlacement``)."""

    HOST = 0
    DEVICE = 1


class DataType(IntEnum):
    """The ``ge::DataType`` values that have an element size (5, 28 and 43 have none)."""

    DT_FLOAT = 0
    DT_FLOAT16 = 1
    DT_INT8 = 2
    DT_INT32 = 3
    DT_UINT8 = 4
    DT_INT16 = 6
    DT_UINT16 = 7
    DT_UINT32 = 8
    DT_INT64 = 9
    DT_UINT64 = 10
    DT_DOUBLE = 11
    DT_BOOL = 12
    DT_STRING = 13
    DT_DUAL_SUB_INT8 = 14
    DT_DUAL_SUB_UINT8 = 15
    DT_COMPLEX64 = 16
    DT_COMPLEX128 = 17
    DT_QINT8 = 18
    DT_QINT16 = 19
    DT_QINT32 = 20
    DT_QUINT8 = 21
    DT_QUINT16 = 22
    DT_RESOURCE = 23
    DT_STRING_REF = 24
    DT_DUAL = 25
    DT_VARIANT = 26
    DT_BF16 = 27
    DT_INT4 = 29
    DT_UINT1 = 30
    DT_INT2 = 31
    DT_UINT2 = 32
    DT_COMPLEX32 = 33
    DT_HIFLOAT8 = 34
    DT_FLOAT8_E5M2 = 35
    DT_FLOAT8_E4M3FN = 36
    DT_FLOAT8_E8M0 = 37
    DT_FLOAT6_E3M2 = 38
    DT_FLOAT6_E2M3 = 39
    DT_FLOAT4_E2M1 = 40
    DT_FLOAT4_E1M2 = 41
    DT_HIFLOAT4 = 42
