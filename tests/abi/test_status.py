"""The status-code table, LLMStatusCode, the exceptions and the ``errors`` CLI.

The expected values below are written by hand from the vendor's status codes (docs/reference/status-codes.md); they are
the independent oracle and are never computed from the module under test.
"""

from __future__ import annotations

import os
import pickle
import pydoc
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llm_datadist_ffi._tools import _errors_cli
from llm_datadist_ffi import status
from llm_datadist_ffi.status import (
    LLMException,
    LLMStatusCode,
    Status,
    exception_for,
    info_for,
    map_status,
)

REPO = Path(__file__).resolve().parents[2]

# docs/reference/status-codes.md §2, "Declaration order of the Python enum", with the values of the table.
SPEC_MEMBERS = [
    ("LLM_SUCCESS", 0),
    ("LLM_FAILED", 4294967295),
    ("LLM_PARAM_INVALID", 0x5010B005),
    ("LLM_WAIT_PROCESS_TIMEOUT", 0x5010B001),
    ("LLM_KV_CACHE_NOT_EXIST", 0x5010B002),
    ("LLM_REPEAT_REQUEST", 0x5010B003),
    ("LLM_REQUEST_ALREADY_COMPLETED", 0x5010B004),
    ("LLM_ENGINE_FINALIZED", 0x5010B006),
    ("LLM_NOT_YET_LINK", 0x5010B007),
    ("LLM_ALREADY_LINK", 0x5010B008),
    ("LLM_LINK_FAILED", 0x5010B009),
    ("LLM_UNLINK_FAILED", 0x5010B00A),
    ("LLM_NOTIFY_PROMPT_UNLINK_FAILED", 0x5010B00B),
    ("LLM_CLUSTER_NUM_EXCEED_LIMIT", 0x5010B00C),
    ("LLM_PROCESSING_LINK", 0x5010B00D),
    ("LLM_DEVICE_OUT_OF_MEMORY", 0x5010B00E),
    ("LLM_PREFIX_ALREADY_EXIST", 0x5010B00F),
    ("LLM_PREFIX_NOT_EXIST", 0x5010B010),
    ("LLM_SEQ_LENOVERLIMIT", 0x5010B011),
    ("LLM_NO_FREE_BLOCK", 0x5010B012),
    ("LLM_BLOCKS_OUT_OF_MEMORY", 0x5010B013),
    ("LLM_EXIST_LINK", 0x5010B018),
    ("LLM_FEATURE_NOT_ENABLED", 0x5010B019),
    ("LLM_TIMEOUT", 0x5010B01A),
    ("LLM_LINK_BUSY", 0x5010B01B),
    ("LLM_OUT_OF_MEMORY", 0x5010B01C),
    ("LLM_DEVICE_MEM_ERROR", 507053),
    ("LLM_SUSPECT_REMOTE_ERROR", 507057),
    ("LLM_UNKNOWN_ERROR", -1),
]

# docs/reference/status-codes.md §2, the code table: (decimal value, C++ name, Python member or None).
SPEC_ROWS = [
    (0, "LLM_SUCCESS", "LLM_SUCCESS"),
    (4294967295, "LLM_FAILED", "LLM_FAILED"),
    (1343270913, "LLM_WAIT_PROC_TIMEOUT", "LLM_WAIT_PROCESS_TIMEOUT"),
    (1343270914, "LLM_KV_CACHE_NOT_EXIST", "LLM_KV_CACHE_NOT_EXIST"),
    (1343270915, "LLM_REPEAT_REQUEST", "LLM_REPEAT_REQUEST"),
    (1343270916, "LLM_REQUEST_ALREADY_COMPLETED", "LLM_REQUEST_ALREADY_COMPLETED"),
    (1343270917, "LLM_PARAM_INVALID", "LLM_PARAM_INVALID"),
    (1343270918, "LLM_ENGINE_FINALIZED", "LLM_ENGINE_FINALIZED"),
    (1343270919, "LLM_NOT_YET_LINK", "LLM_NOT_YET_LINK"),
    (1343270920, "LLM_ALREADY_LINK", "LLM_ALREADY_LINK"),
    (1343270921, "LLM_LINK_FAILED", "LLM_LINK_FAILED"),
    (1343270922, "LLM_UNLINK_FAILED", "LLM_UNLINK_FAILED"),
    (1343270923, "LLM_NOTIFY_PROMPT_UNLINK_FAILED", "LLM_NOTIFY_PROMPT_UNLINK_FAILED"),
    (1343270924, "LLM_CLUSTER_NUM_EXCEED_LIMIT", "LLM_CLUSTER_NUM_EXCEED_LIMIT"),
    (1343270925, "LLM_PROCESSING_LINK", "LLM_PROCESSING_LINK"),
    (1343270926, "LLM_DEVICE_OUT_OF_MEMORY", "LLM_DEVICE_OUT_OF_MEMORY"),
    (1343270927, "LLM_PREFIX_ALREADY_EXIST", "LLM_PREFIX_ALREADY_EXIST"),
    (1343270928, "LLM_PREFIX_NOT_EXIST", "LLM_PREFIX_NOT_EXIST"),
    (1343270929, "LLM_SEQ_LEN_OVER_LIMIT", "LLM_SEQ_LENOVERLIMIT"),
    (1343270930, "LLM_NO_FREE_BLOCK", "LLM_NO_FREE_BLOCK"),
    (1343270931, "LLM_BLOCKS_OUT_OF_MEMORY", "LLM_BLOCKS_OUT_OF_MEMORY"),
    (1343270932, "LLM_CACHE_INCOMPATIBLE", None),
    (1343270933, "LLM_CACHE_KEY_ALREADY_EXIST", None),
    (1343270934, "LLM_COPY_CACHE_FAILED", None),
    (1343270935, "LLM_CACHE_ID_ALREADY_EXIST", None),
    (1343270936, "LLM_EXIST_LINK", "LLM_EXIST_LINK"),
    (1343270937, "LLM_FEATURE_NOT_ENABLED", "LLM_FEATURE_NOT_ENABLED"),
    (1343270938, "LLM_TIMEOUT", "LLM_TIMEOUT"),
    (1343270939, "LLM_LINK_BUSY", "LLM_LINK_BUSY"),
    (1343270940, "LLM_OUT_OF_MEMORY", "LLM_OUT_OF_MEMORY"),
    (507053, "ACL_ERROR_RT_DEVICE_MEM_ERROR", "LLM_DEVICE_MEM_ERROR"),
    (507057, "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR", "LLM_SUSPECT_REMOTE_ERROR"),
    (-1, None, "LLM_UNKNOWN_ERROR"),
]

# docs/reference/status-codes.md §2, column "In C++ header" (18 codes).
SPEC_IN_CPP_HEADER = {
    0, 0xFFFFFFFF, 0x5010B001, 0x5010B002, 0x5010B005, 0x5010B007, 0x5010B008,
    0x5010B009, 0x5010B00A, 0x5010B00B, 0x5010B00C, 0x5010B00D, 0x5010B00E,
    0x5010B018, 0x5010B019, 0x5010B01A, 0x5010B01B, 0x5010B01C,
}

Y, N, L, NA = "yes", "no", "not listed", "n/a"
# docs/reference/status-codes.md §3: (Python doc, v1 Python doc, C++ doc) and the resolved flag of status-codes.md §8.6
# (Python doc first, then v1 Python doc, then C++ doc; no opinion -> not recoverable).
SPEC_RECOVERABILITY = {
    "LLM_SUCCESS": (NA, NA, NA, False),
    "LLM_FAILED": (N, N, N, False),
    "LLM_WAIT_PROCESS_TIMEOUT": (L, Y, Y, True),
    "LLM_KV_CACHE_NOT_EXIST": (Y, Y, Y, True),
    "LLM_REPEAT_REQUEST": (Y, Y, L, True),
    "LLM_REQUEST_ALREADY_COMPLETED": (L, L, L, False),
    "LLM_PARAM_INVALID": (Y, Y, Y, True),
    "LLM_ENGINE_FINALIZED": (L, L, L, False),
    "LLM_NOT_YET_LINK": (Y, Y, Y, True),
    "LLM_ALREADY_LINK": (Y, Y, Y, True),
    "LLM_LINK_FAILED": (Y, Y, Y, True),
    "LLM_UNLINK_FAILED": (Y, Y, Y, True),
    "LLM_NOTIFY_PROMPT_UNLINK_FAILED": (Y, Y, Y, True),
    "LLM_CLUSTER_NUM_EXCEED_LIMIT": (Y, Y, Y, True),
    "LLM_PROCESSING_LINK": (Y, Y, Y, True),
    "LLM_DEVICE_OUT_OF_MEMORY": (L, Y, Y, True),
    "LLM_PREFIX_ALREADY_EXIST": (Y, Y, L, True),
    "LLM_PREFIX_NOT_EXIST": (Y, Y, L, True),
    "LLM_SEQ_LENOVERLIMIT": (L, L, L, False),
    "LLM_NO_FREE_BLOCK": (L, L, L, False),
    "LLM_BLOCKS_OUT_OF_MEMORY": (L, L, L, False),
    "LLM_EXIST_LINK": (Y, Y, Y, True),
    "LLM_FEATURE_NOT_ENABLED": (Y, Y, Y, True),
    "LLM_TIMEOUT": (Y, L, N, True),
    "LLM_LINK_BUSY": (Y, Y, Y, True),
    "LLM_OUT_OF_MEMORY": (Y, Y, Y, True),
    "LLM_DEVICE_MEM_ERROR": (Y, Y, L, True),
    "LLM_SUSPECT_REMOTE_ERROR": (N, N, L, False),
    "LLM_UNKNOWN_ERROR": (N, N, L, False),
    "LLM_CACHE_INCOMPATIBLE": (L, L, L, False),
    "LLM_CACHE_KEY_ALREADY_EXIST": (L, L, L, False),
    "LLM_COPY_CACHE_FAILED": (L, L, L, False),
    "LLM_CACHE_ID_ALREADY_EXIST": (L, L, L, False),
}

# docs/reference/status-codes.md §4: the codes with at least one producer in each generation.
SPEC_PRODUCED_IN_V2 = {
    "LLM_SUCCESS", "LLM_FAILED", "LLM_KV_CACHE_NOT_EXIST", "LLM_PARAM_INVALID",
    "LLM_NOT_YET_LINK", "LLM_ALREADY_LINK", "LLM_LINK_FAILED", "LLM_UNLINK_FAILED",
    "LLM_EXIST_LINK", "LLM_FEATURE_NOT_ENABLED", "LLM_TIMEOUT", "LLM_OUT_OF_MEMORY",
    "LLM_DEVICE_MEM_ERROR", "LLM_SUSPECT_REMOTE_ERROR",
}
SPEC_PRODUCED_IN_V1 = {
    "LLM_SUCCESS", "LLM_FAILED", "LLM_WAIT_PROCESS_TIMEOUT", "LLM_KV_CACHE_NOT_EXIST",
    "LLM_REPEAT_REQUEST", "LLM_PARAM_INVALID", "LLM_NOT_YET_LINK", "LLM_ALREADY_LINK",
    "LLM_LINK_FAILED", "LLM_UNLINK_FAILED", "LLM_NOTIFY_PROMPT_UNLINK_FAILED",
    "LLM_CLUSTER_NUM_EXCEED_LIMIT", "LLM_PROCESSING_LINK", "LLM_DEVICE_OUT_OF_MEMORY",
    "LLM_EXIST_LINK", "LLM_FEATURE_NOT_ENABLED", "LLM_LINK_BUSY",
    # produced by the v1 device side, turned into LLM_FAILED by the v1 core
    "LLM_CACHE_INCOMPATIBLE", "LLM_CACHE_KEY_ALREADY_EXIST", "LLM_COPY_CACHE_FAILED",
    "LLM_CACHE_ID_ALREADY_EXIST",
}

# The project's exception classes: member -> (class name, family class name or None).
EXPECTED_CLASSES = {
    "LLM_FAILED": ("FailedError", None),
    "LLM_PARAM_INVALID": ("ParamInvalidError", None),
    "LLM_WAIT_PROCESS_TIMEOUT": ("WaitProcessTimeoutError", "LLMTimeoutError"),
    "LLM_KV_CACHE_NOT_EXIST": ("KvCacheNotExistError", None),
    "LLM_REPEAT_REQUEST": ("RepeatRequestError", None),
    "LLM_REQUEST_ALREADY_COMPLETED": ("RequestAlreadyCompletedError", None),
    "LLM_ENGINE_FINALIZED": ("EngineFinalizedError", None),
    "LLM_NOT_YET_LINK": ("NotYetLinkError", "LinkError"),
    "LLM_ALREADY_LINK": ("AlreadyLinkError", "LinkError"),
    "LLM_LINK_FAILED": ("LinkFailedError", "LinkError"),
    "LLM_UNLINK_FAILED": ("UnlinkFailedError", "LinkError"),
    "LLM_NOTIFY_PROMPT_UNLINK_FAILED": ("NotifyPromptUnlinkFailedError", "LinkError"),
    "LLM_CLUSTER_NUM_EXCEED_LIMIT": ("ClusterNumExceedLimitError", "LinkError"),
    "LLM_PROCESSING_LINK": ("ProcessingLinkError", "LinkError"),
    "LLM_DEVICE_OUT_OF_MEMORY": ("DeviceOutOfMemoryError", "LLMMemoryError"),
    "LLM_PREFIX_ALREADY_EXIST": ("PrefixAlreadyExistError", "PrefixError"),
    "LLM_PREFIX_NOT_EXIST": ("PrefixNotExistError", "PrefixError"),
    "LLM_SEQ_LENOVERLIMIT": ("SeqLenOverLimitError", None),
    "LLM_NO_FREE_BLOCK": ("NoFreeBlockError", "LLMMemoryError"),
    "LLM_BLOCKS_OUT_OF_MEMORY": ("BlocksOutOfMemoryError", "LLMMemoryError"),
    "LLM_EXIST_LINK": ("ExistLinkError", "LinkError"),
    "LLM_FEATURE_NOT_ENABLED": ("FeatureNotEnabledError", None),
    "LLM_TIMEOUT": ("ProcessingTimeoutError", "LLMTimeoutError"),
    "LLM_LINK_BUSY": ("LinkBusyError", "LinkError"),
    "LLM_OUT_OF_MEMORY": ("OutOfMemoryError", "LLMMemoryError"),
    "LLM_DEVICE_MEM_ERROR": ("DeviceMemError", "LLMMemoryError"),
    "LLM_SUSPECT_REMOTE_ERROR": ("SuspectRemoteError", "LLMMemoryError"),
    "LLM_UNKNOWN_ERROR": ("UnknownError", None),
}

# Raw values without a member: codes 20-23, ACL codes other than 507053/507057
# (507046 is mapped to LLM_TIMEOUT by the core, not by Python), -1, and others.
UNMAPPED_RAW = [
    0x5010B014, 0x5010B015, 0x5010B016, 0x5010B017, 0x5010B01D, 0x5010BFFF,
    507000, 507046, 507899, 107000, 207001, -1, -2, 1, 100, 2**40,
]


def all_exception_classes() -> list[type[LLMException]]:
    found: list[type[LLMException]] = []
    pending = list(LLMException.__subclasses__())
    while pending:
        cls = pending.pop()
        if cls.__module__ == status.__name__:
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return sorted(found, key=lambda cls: cls.__name__)


def row_named(name: str) -> status.StatusInfo:
    return next(row for row in status.STATUS_TABLE if name in (row.python_name, row.cpp_name))


# --- LLMStatusCode ---------------------------------------------------------------


def test_status_code_has_exactly_the_29_vendor_members_in_declaration_order() -> None:
    assert [(m.name, m.value) for m in LLMStatusCode] == SPEC_MEMBERS
    assert len(LLMStatusCode) == 29


def test_status_code_is_an_int_enum_whose_members_equal_their_ints() -> None:
    assert issubclass(LLMStatusCode, int)
    assert LLMStatusCode.LLM_PARAM_INVALID == 0x5010B005
    assert hash(LLMStatusCode.LLM_PARAM_INVALID) == hash(0x5010B005)
    assert 0x5010B01A in [LLMStatusCode.LLM_TIMEOUT, 7]
    assert int(LLMStatusCode.LLM_FAILED) == 4294967295


def test_str_and_format_of_a_member_give_the_qualified_name() -> None:
    member = LLMStatusCode.LLM_SEQ_LENOVERLIMIT
    assert str(member) == "LLMStatusCode.LLM_SEQ_LENOVERLIMIT"
    assert f"{member}" == "LLMStatusCode.LLM_SEQ_LENOVERLIMIT"
    assert "{}".format(LLMStatusCode.LLM_SUCCESS) == "LLMStatusCode.LLM_SUCCESS"
    assert repr(LLMStatusCode.LLM_TIMEOUT) == "<LLMStatusCode.LLM_TIMEOUT: 1343270938>"


def test_failed_is_unsigned_and_is_not_the_unknown_error() -> None:
    assert LLMStatusCode.LLM_FAILED == 0xFFFFFFFF
    assert LLMStatusCode.LLM_FAILED != -1
    assert LLMStatusCode.LLM_UNKNOWN_ERROR == -1
    assert LLMStatusCode.LLM_FAILED != LLMStatusCode.LLM_UNKNOWN_ERROR


def test_calling_the_enum_with_a_code_without_member_raises_value_error() -> None:
    with pytest.raises(ValueError):
        LLMStatusCode(0x5010B014)


# --- The table -----------------------------------------------------------------------


def test_table_holds_every_code_of_the_spec_with_its_names_in_spec_order() -> None:
    assert [(r.value, r.cpp_name, r.python_name) for r in status.STATUS_TABLE] == SPEC_ROWS


def test_every_table_row_with_a_python_name_is_the_member_of_that_name_and_value() -> None:
    for row in status.STATUS_TABLE:
        if row.python_name is None:
            assert row.member is None
        else:
            assert row.member is LLMStatusCode[row.python_name]
            assert row.member.value == row.value
    named = {row.python_name for row in status.STATUS_TABLE if row.python_name}
    assert named == {name for name, _ in SPEC_MEMBERS}


def test_rows_flagged_as_in_the_cpp_header_are_the_18_restated_codes() -> None:
    flagged = {row.value for row in status.STATUS_TABLE if row.in_cpp_header}
    assert flagged == SPEC_IN_CPP_HEADER


def test_success_and_failed_also_have_their_ge_names() -> None:
    assert info_for("SUCCESS").value == 0
    assert info_for("FAILED").value == 0xFFFFFFFF


@pytest.mark.parametrize("name", sorted(SPEC_RECOVERABILITY))
def test_each_documents_recoverability_opinion_and_the_resolved_flag_match_the_spec(
    name: str,
) -> None:
    row = row_named(name)
    python_doc, v1_doc, cpp_doc, resolved = SPEC_RECOVERABILITY[name]
    assert (row.python_doc.value, row.v1_python_doc.value, row.cpp_doc.value) == (
        python_doc,
        v1_doc,
        cpp_doc,
    )
    assert row.recoverable is resolved


def test_the_table_covers_every_row_of_the_recoverability_oracle() -> None:
    assert {row.python_name or row.cpp_name for row in status.STATUS_TABLE} == set(
        SPEC_RECOVERABILITY
    )


def test_timeout_follows_the_python_document_where_the_documents_disagree() -> None:
    row = info_for(LLMStatusCode.LLM_TIMEOUT)
    assert row.cpp_doc.value == "no" and row.python_doc.value == "yes"
    assert row.recoverable is True
    assert row.recoverable_source == "Python doc"
    assert "link again" in row.remedy
    assert row.doc_notes


def test_every_row_has_a_meaning_and_a_remedy() -> None:
    for row in status.STATUS_TABLE:
        assert row.meaning.strip(), row
        assert row.remedy.strip(), row


def test_producers_per_generation_match_section_4() -> None:
    v2 = {row.python_name or row.cpp_name for row in status.STATUS_TABLE if row.v2_producers}
    v1 = {row.python_name or row.cpp_name for row in status.STATUS_TABLE if row.v1_producers}
    assert v2 == SPEC_PRODUCED_IN_V2
    assert v1 == SPEC_PRODUCED_IN_V1


def test_a_generation_without_producers_has_a_note_where_the_spec_gives_a_reason() -> None:
    assert "LLM_TIMEOUT" in info_for("LLM_WAIT_PROCESS_TIMEOUT").v2_note
    assert "LLM_FAILED" in info_for("LLM_TIMEOUT").v1_note
    assert "16" in info_for("LLM_CLUSTER_NUM_EXCEED_LIMIT").v2_note


def test_producers_name_the_calls_of_section_4() -> None:
    def calls(name: str, generation: str) -> str:
        row = row_named(name)
        producers = row.v2_producers if generation == "v2" else row.v1_producers
        return " ".join(f"{p.call} {p.condition}" for p in producers)

    assert "switch_role" in calls("LLM_EXIST_LINK", "v2")
    assert "link_clusters" in calls("LLM_TIMEOUT", "v2")
    assert "sync_kv_timeout" in calls("LLM_TIMEOUT", "v2")
    assert "16" in calls("LLM_CLUSTER_NUM_EXCEED_LIMIT", "v1")
    assert "batch_index" in calls("LLM_KV_CACHE_NOT_EXIST", "v2")
    assert "Cannot init multiple LLMDataDists" in calls("LLM_FAILED", "v2")
    assert "allocate_cache" in calls("LLM_OUT_OF_MEMORY", "v2")
    assert "CopyKvBlocks" in calls("LLM_FEATURE_NOT_ENABLED", "v2")


# --- The C header ---------------------------------------------------------------------

ENUMERATOR = re.compile(r"^\s*((?:LLM|ACL)_[A-Z0-9_]+)\s*=\s*(0[xX][0-9A-Fa-f]+|\d+)\s*,?", re.M)


def header_values(relative: str) -> dict[str, int]:
    text = (REPO / relative).read_text()
    return {name: int(value, 0) for name, value in ENUMERATOR.findall(text)}


def test_every_llm_enumerator_of_the_c_header_has_the_table_value() -> None:
    declared = header_values("include/lldd/status.h")
    assert declared, "no LLM_* enumerators found in include/lldd/status.h"
    by_cpp_name = {row.cpp_name: row.value for row in status.STATUS_TABLE if row.cpp_name}
    assert {name: by_cpp_name.get(name) for name in declared} == declared


def test_the_c_header_declares_every_llm_code_of_the_table() -> None:
    declared = header_values("include/lldd/status.h")
    llm_rows = {
        row.cpp_name: row.value
        for row in status.STATUS_TABLE
        if row.cpp_name is not None and row.cpp_name.startswith("LLM_")
    }
    assert declared == llm_rows
    assert len(declared) == 30


def test_the_c_spelling_of_seq_len_over_limit_is_the_python_member_lenoverlimit() -> None:
    declared = header_values("include/lldd/status.h")
    assert declared["LLM_SEQ_LEN_OVER_LIMIT"] == LLMStatusCode.LLM_SEQ_LENOVERLIMIT
    assert declared["LLM_WAIT_PROC_TIMEOUT"] == LLMStatusCode.LLM_WAIT_PROCESS_TIMEOUT
    assert declared["LLM_FAILED"] == 0xFFFFFFFF


def test_the_acl_header_declares_the_two_acl_codes_with_the_table_values() -> None:
    declared = header_values("include/acl/types.h")
    for name in ("ACL_ERROR_RT_DEVICE_MEM_ERROR", "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR"):
        assert declared[name] == info_for(name).value


# --- The mapping rule --------------------------------------------------------------


@pytest.mark.parametrize("name, value", [m for m in SPEC_MEMBERS if m[0] != "LLM_UNKNOWN_ERROR"])
def test_a_value_with_a_member_maps_to_that_member(name: str, value: int) -> None:
    assert map_status(value) is LLMStatusCode[name]


@pytest.mark.parametrize("raw", UNMAPPED_RAW)
def test_any_other_int_maps_to_failed_never_to_unknown_error(raw: int) -> None:
    assert map_status(raw) is LLMStatusCode.LLM_FAILED


def test_mapping_a_member_gives_the_member_back() -> None:
    assert map_status(LLMStatusCode.LLM_LINK_BUSY) is LLMStatusCode.LLM_LINK_BUSY


# --- LLMException --------------------------------------------------------------------


def test_llm_exception_without_status_code_carries_success_like_the_vendor() -> None:
    error = LLMException("size cannot be computed")
    assert error.status_code is LLMStatusCode.LLM_SUCCESS
    assert str(error) == "size cannot be computed"
    assert error.args == ("size cannot be computed",)


def test_llm_exception_keeps_an_arbitrary_status_code_unchanged() -> None:
    assert LLMException("x", status_code=100).status_code == 100
    assert type(LLMException("x", status_code=100).status_code) is int
    assert LLMException(status_code=None).status_code is None
    marker = object()
    assert LLMException(status_code=marker).status_code is marker


def test_llm_exception_is_a_runtime_error_with_ordinary_args() -> None:
    error = LLMException("a", 2, status_code=LLMStatusCode.LLM_FAILED)
    assert isinstance(error, RuntimeError)
    assert error.args == ("a", 2)
    assert str(error) == "('a', 2)"
    assert str(LLMException()) == ""


def test_status_code_recoverable_and_remedy_are_read_only() -> None:
    error = LLMException("x", status_code=LLMStatusCode.LLM_TIMEOUT)
    for attribute in ("status_code", "raw_status", "recoverable", "remedy"):
        with pytest.raises(AttributeError):
            setattr(error, attribute, 1)


def test_llm_exception_reads_recoverable_and_remedy_for_its_status_code() -> None:
    error = LLMException("x", status_code=LLMStatusCode.LLM_NOT_YET_LINK)
    assert error.recoverable is True
    assert "link" in error.remedy
    unknown = LLMException("x", status_code=100)
    assert unknown.recoverable is False
    assert unknown.remedy
    assert unknown.raw_status == 100


@pytest.mark.parametrize("cls", all_exception_classes(), ids=lambda cls: cls.__name__)
def test_every_subclass_derives_from_llm_exception_and_no_other_builtin(
    cls: type[LLMException],
) -> None:
    builtin_bases = {k for k in cls.__mro__ if k.__module__ == "builtins"}
    assert builtin_bases == {RuntimeError, Exception, BaseException, object}
    for forbidden in (
        ValueError, TypeError, TimeoutError, OSError, MemoryError, KeyError,
        ConnectionError, LookupError, ArithmeticError,
    ):
        assert not issubclass(cls, forbidden)
    assert issubclass(cls, LLMException)


@pytest.mark.parametrize("cls", all_exception_classes(), ids=lambda cls: cls.__name__)
def test_every_subclass_is_caught_by_llm_exception_and_not_by_type_or_value_error(
    cls: type[LLMException],
) -> None:
    caught_by = None
    try:
        try:
            raise cls("boom", status_code=LLMStatusCode.LLM_FAILED)
        except (TypeError, ValueError):
            caught_by = "bad arguments"
        except (TimeoutError, OSError, MemoryError, KeyError):
            caught_by = "builtin"
    except LLMException as error:
        caught_by = "LLMException"
        assert isinstance(error, RuntimeError)
        assert error.status_code is LLMStatusCode.LLM_FAILED
        assert str(error) == "boom"
        assert error.args == ("boom",)
    assert caught_by == "LLMException"


@pytest.mark.parametrize("member_name", sorted(EXPECTED_CLASSES))
def test_each_member_has_its_declared_class_in_its_family(member_name: str) -> None:
    class_name, family = EXPECTED_CLASSES[member_name]
    cls = getattr(status, class_name)
    member = LLMStatusCode[member_name]
    assert status.EXCEPTION_CLASSES[member] is cls
    assert cls.code is member
    assert cls.__bases__ == ((getattr(status, family),) if family else (LLMException,))
    assert class_name in status.__all__


def test_success_has_no_exception_class_of_its_own() -> None:
    assert LLMStatusCode.LLM_SUCCESS not in status.EXCEPTION_CLASSES
    assert set(status.EXCEPTION_CLASSES) == set(LLMStatusCode) - {LLMStatusCode.LLM_SUCCESS}


def test_a_subclass_built_without_status_code_carries_its_own_code() -> None:
    error = status.NotYetLinkError("no link")
    assert error.status_code is LLMStatusCode.LLM_NOT_YET_LINK
    assert error.raw_status == 0x5010B007
    assert str(error) == "no link"


def test_leaf_classes_expose_recoverable_and_remedy_at_class_level() -> None:
    assert status.ParamInvalidError.recoverable is True
    assert status.FailedError.recoverable is False
    assert status.ProcessingTimeoutError.recoverable is True
    assert status.SuspectRemoteError.recoverable is False
    assert "16" in status.ClusterNumExceedLimitError.remedy


def test_family_classes_have_no_class_level_recoverable() -> None:
    for family in (status.LinkError, status.LLMTimeoutError, LLMException):
        with pytest.raises(AttributeError):
            family.recoverable  # noqa: B018 - the read itself is the test


def test_help_renders_for_root_family_and_leaf_classes() -> None:
    for cls in (LLMException, status.LinkError, status.ParamInvalidError):
        assert cls.__name__ in pydoc.render_doc(cls)


def test_a_client_subclass_naming_a_code_does_not_take_over_exception_for() -> None:
    class ClientError(status.ParamInvalidError):
        code = LLMStatusCode.LLM_PARAM_INVALID

    assert type(exception_for(0x5010B005, "p")) is status.ParamInvalidError
    assert ClientError("c").status_code is LLMStatusCode.LLM_PARAM_INVALID


def test_a_family_catches_all_its_members() -> None:
    with pytest.raises(status.LinkError):
        raise exception_for(0x5010B01B, "busy")
    with pytest.raises(status.LLMTimeoutError):
        raise exception_for(0x5010B001, "waited")
    with pytest.raises(status.LLMMemoryError):
        raise exception_for(507053, "uce")


def test_exceptions_survive_pickling_with_code_and_raw_status() -> None:
    error = exception_for(0x5010B016, "copy failed")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is status.FailedError
    assert copy.status_code is LLMStatusCode.LLM_FAILED
    assert copy.raw_status == 0x5010B016
    assert copy.args == ("copy failed",)
    plain = pickle.loads(pickle.dumps(LLMException("p", status_code=100)))
    assert plain.status_code == 100


# --- exception_for -----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, class_name, member_name",
    [
        (0x5010B005, "ParamInvalidError", "LLM_PARAM_INVALID"),
        (0x5010B002, "KvCacheNotExistError", "LLM_KV_CACHE_NOT_EXIST"),
        (0x5010B007, "NotYetLinkError", "LLM_NOT_YET_LINK"),
        (0x5010B009, "LinkFailedError", "LLM_LINK_FAILED"),
        (0x5010B001, "WaitProcessTimeoutError", "LLM_WAIT_PROCESS_TIMEOUT"),
        (0x5010B01A, "ProcessingTimeoutError", "LLM_TIMEOUT"),
        (0x5010B01C, "OutOfMemoryError", "LLM_OUT_OF_MEMORY"),
        (0x5010B019, "FeatureNotEnabledError", "LLM_FEATURE_NOT_ENABLED"),
        (507053, "DeviceMemError", "LLM_DEVICE_MEM_ERROR"),
        (507057, "SuspectRemoteError", "LLM_SUSPECT_REMOTE_ERROR"),
        (0xFFFFFFFF, "FailedError", "LLM_FAILED"),
        (0x5010B014, "FailedError", "LLM_FAILED"),
        (0x5010B017, "FailedError", "LLM_FAILED"),
        (507046, "FailedError", "LLM_FAILED"),
        (-1, "FailedError", "LLM_FAILED"),
    ],
)
def test_exception_for_picks_the_class_of_the_mapped_code_and_keeps_the_raw_value(
    raw: int, class_name: str, member_name: str
) -> None:
    error = exception_for(raw, "[pull_blocks] failed")
    assert type(error) is getattr(status, class_name)
    assert error.status_code is LLMStatusCode[member_name]
    assert error.raw_status == raw
    assert error.args == ("[pull_blocks] failed",)
    assert str(error) == "[pull_blocks] failed"
    assert isinstance(error, LLMException)


def test_exception_for_zero_gives_a_plain_llm_exception_carrying_success() -> None:
    error = exception_for(0, "odd")
    assert type(error) is LLMException
    assert error.status_code is LLMStatusCode.LLM_SUCCESS


def test_exception_for_reads_recoverability_from_the_mapped_code() -> None:
    assert exception_for(0x5010B01A, "t").recoverable is True
    assert exception_for(0x5010B014, "x").recoverable is False
    assert exception_for(0x5010B014, "x").remedy == info_for("LLM_FAILED").remedy
    assert exception_for(0x5010B005, "p").remedy == info_for(0x5010B005).remedy


# --- Status --------------------------------------------------------------------------


def test_status_is_ok_for_success_and_for_a_plain_zero() -> None:
    assert Status(LLMStatusCode.LLM_SUCCESS).is_ok() is True
    assert Status(0).is_ok() is True
    assert Status(LLMStatusCode.LLM_FAILED).is_ok() is False
    assert Status(0x5010B005).is_ok() is False


def test_status_returns_its_status_code_as_passed() -> None:
    assert Status(LLMStatusCode.LLM_TIMEOUT).status_code is LLMStatusCode.LLM_TIMEOUT
    assert Status(100).status_code == 100
    with pytest.raises(AttributeError):
        Status(0).status_code = 1  # type: ignore[misc,assignment]


# --- info_for -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        0x5010B005,
        LLMStatusCode.LLM_PARAM_INVALID,
        "0x5010B005",
        "0x5010b005",
        "1343270917",
        " 1343270917 ",
        "LLM_PARAM_INVALID",
        "llm_param_invalid",
        "LLMStatusCode.LLM_PARAM_INVALID",
    ],
)
def test_info_for_finds_a_code_by_value_hex_decimal_or_name(query: int | str) -> None:
    assert info_for(query).value == 1343270917


@pytest.mark.parametrize(
    "query, value",
    [
        ("LLM_SEQ_LEN_OVER_LIMIT", 0x5010B011),
        ("llm_seq_lenoverlimit", 0x5010B011),
        ("LLM_WAIT_PROC_TIMEOUT", 0x5010B001),
        ("LLM_WAIT_PROCESS_TIMEOUT", 0x5010B001),
        ("llm_cache_incompatible", 0x5010B014),
        ("0xFFFFFFFF", 4294967295),
        ("acl_error_rt_device_mem_error", 507053),
        ("507057", 507057),
        ("-1", -1),
    ],
)
def test_info_for_accepts_both_spellings_and_codes_without_a_member(
    query: str, value: int
) -> None:
    assert info_for(query).value == value


@pytest.mark.parametrize("query", ["0x1234", "42", "LLM_NO_SUCH_CODE", "", "0xZZ", 507046])
def test_info_for_rejects_an_unknown_code_with_a_value_error(query: int | str) -> None:
    with pytest.raises(ValueError, match="unknown status code"):
        info_for(query)


def test_info_for_says_an_unknown_value_is_reported_as_failed() -> None:
    with pytest.raises(ValueError, match="LLM_FAILED"):
        info_for(507046)


@pytest.mark.parametrize("query", [True, 1.5, None, b"0x5010B005"])
def test_info_for_rejects_other_types_with_a_type_error(query: object) -> None:
    with pytest.raises(TypeError):
        info_for(query)  # type: ignore[arg-type]


# --- The errors CLI -----------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = _errors_cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_explains_param_invalid_with_names_remedy_and_producers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "0x5010B005")
    assert code == 0 and err == ""
    assert out.startswith("LLM_PARAM_INVALID  0x5010B005 (1343270917)")
    assert "ParamInvalidError" in out
    assert "Recoverable   yes" in out
    assert "fix the arguments" in out
    assert "Returned in v2:" in out and "Returned in v1:" in out
    assert "LLMDataDist.init: an option cannot be parsed" in out
    assert "pull_cache: called by a cluster that is not a Decoder" in out


def test_cli_gives_the_same_explanation_for_hex_decimal_and_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outputs = {run_cli(capsys, query)[1] for query in ("0x5010B011", "1343270929", "llm_seq_len_over_limit")}
    assert len(outputs) == 1
    (out,) = outputs
    assert "LLM_SEQ_LEN_OVER_LIMIT" in out and "LLMStatusCode.LLM_SEQ_LENOVERLIMIT" in out


def test_cli_explains_a_code_without_member_as_failed_with_raw_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, "0x5010B014")
    assert code == 0
    assert "LLM_CACHE_INCOMPATIBLE" in out
    assert "LLMStatusCode.LLM_FAILED" in out and "FailedError" in out
    assert "raw_status 1343270932" in out


def test_cli_timeout_shows_each_documents_opinion(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_cli(capsys, "LLM_TIMEOUT")
    assert "Python doc: yes; v1 Python doc: not listed; C++ doc: no" in out
    assert "Returned in v1: none" in out


def test_cli_without_code_lists_every_code_with_both_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys)
    assert code == 0
    lines = out.splitlines()
    for value, cpp_name, python_name in SPEC_ROWS:
        hex_text = f"0x{value:08X}" if value >= 0 else "-"
        matching = [
            line for line in lines
            if line.startswith(hex_text + " ") and f" {value} " in line
        ]
        assert len(matching) == 1, (value, matching)
        for name in (cpp_name, python_name):
            if name:
                assert re.search(rf"\b{name}\b", matching[0]), (name, matching[0])
    seq_line = next(line for line in lines if line.startswith("0x5010B011"))
    assert "LLM_SEQ_LEN_OVER_LIMIT" in seq_line and "LLM_SEQ_LENOVERLIMIT" in seq_line
    assert re.search(r"\byes\b", seq_line) is None


def test_cli_rejects_an_unknown_code_with_exit_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "0x1234")
    assert code == 2 and out == ""
    assert "unknown status code" in err and "LLM_FAILED" in err


def test_cli_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "--markdown" in out


def test_cli_markdown_for_one_code_is_its_section_of_the_reference(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, "--markdown", "507053")
    assert code == 0
    assert out.startswith("### `LLM_DEVICE_MEM_ERROR` — 0x0007BCAD (507053)")
    assert out in _errors_cli.render_markdown()


def test_committed_error_code_reference_equals_the_generator_output(
    capsys: pytest.CaptureFixture[str],
) -> None:
    committed = (REPO / "docs" / "error-codes.md").read_text(encoding="utf-8")
    code, out, _ = run_cli(capsys, "--markdown")
    assert code == 0
    assert committed == out, (
        "docs/error-codes.md is stale; regenerate it with "
        "`python -m llm_datadist_ffi errors --markdown > docs/error-codes.md`"
    )


def test_error_code_reference_starts_with_a_generated_notice_and_the_command() -> None:
    first = _errors_cli.render_markdown().splitlines()[0]
    assert "Generated" in first and "do not edit" in first
    assert "python -m llm_datadist_ffi errors --markdown > docs/error-codes.md" in first


def test_error_code_reference_lists_every_code_in_its_summary() -> None:
    text = _errors_cli.render_markdown()
    for value, cpp_name, python_name in SPEC_ROWS:
        assert f"| {value} |" in text
        assert f"`{python_name or cpp_name}`" in text


def test_cli_runs_as_python_dash_m(tmp_path: Path) -> None:
    # Run the same copy of the package that this test imported (source tree or installed).
    package_parent = Path(status.__file__).resolve().parents[1]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(package_parent), *filter(None, [env.get("PYTHONPATH")])]
    )
    result = subprocess.run(
        [sys.executable, "-m", "llm_datadist_ffi", "errors", "0x5010B005"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("LLM_PARAM_INVALID  0x5010B005 (1343270917)")
    assert "LLMDataDist.init" in result.stdout
