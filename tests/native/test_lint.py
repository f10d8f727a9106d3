"""The lint machinery (docs/semantics.md §0): warning classes, where warnings point,
strict mode, the mock's per-thread lint record, and the option-key lint (OPT-1)."""
from __future__ import annotations

import threading
import warnings

import pytest

import llm_datadist_ffi
from llm_datadist_ffi import LLMException, LLMStatusCode, lint, native

import vendor_support as vs
from lint_support import lenient, strict


def test_every_rule_has_its_own_warning_class_naming_it() -> None:
    classes = [rule.category for rule in lint.RULES.values()]
    assert len(set(classes)) == len(classes)
    for rule_id, rule in lint.RULES.items():
        assert issubclass(rule.category, llm_datadist_ffi.LintWarning) and rule.category.rule == rule_id
    assert issubclass(llm_datadist_ffi.LintWarning, UserWarning)


def test_a_lint_warns_at_the_callers_line_and_strict_mode_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    with pytest.warns(lint.RepeatedDestinationBlockWarning) as record:
        lint.lint("PR-5", "[call] dst_blocks contains block 3 more than once")
    assert record[0].filename == __file__
    assert str(record[0].message) == ("[call] dst_blocks contains block 3 more than once (PR-5; the device: every "
                                      "pair is copied; the last write wins)")
    strict(monkeypatch)
    with pytest.raises(LLMException) as info:
        lint.lint("PR-20", "[call] cache id 0")
    assert info.value.status_code == LLMStatusCode.LLM_KV_CACHE_NOT_EXIST and "(PR-20;" in str(info.value)


def test_an_escalated_lint_is_an_error_of_its_class(monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", llm_datadist_ffi.LintWarning)
        with pytest.raises(lint.EmptyLayerRangeWarning):
            lint.lint("PR-2", "[call] src_layer_range range(2, 2) is empty")


@pytest.mark.mock_only(reason="the lint record is part of the mock's control interface")
def test_the_mock_keeps_a_lint_record_per_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    from llm_datadist_ffi._core._loader import ffi, lldd_lib
    lldd_lib.lldd_mock_lint_clear()
    assert lldd_lib.lldd_mock_lint_count() == 0
    assert lldd_lib.lldd_mock_lint_rule(0) == 0 and ffi.string(lldd_lib.lldd_mock_lint_text(0)) == b""
    seen_elsewhere = []
    thread = threading.Thread(target=lambda: seen_elsewhere.append(int(lldd_lib.lldd_mock_lint_count())))
    # a raw pull whose source pair is {-1, 0} and destination pair a range: PR-11, then
    # PR-1, recorded at the API check in this thread only; the pull then goes on
    engine = native.LlmDataDist(7, native.LlmRole.DECODER)
    engine.initialize({native.OPTION_DEVICE_ID: "0"})
    try:
        index = ffi.new("lldd_cache_index *")
        index.cluster_id, index.cache_id = 9, 1
        cache = ffi.new("lldd_cache *")
        cache.cache_id = 1
        ext = ffi.new("lldd_ext_param *")
        ext.src_layer_first, ext.src_layer_second, ext.dst_layer_first, ext.dst_layer_second = -1, 0, 0, 0
        ext.tensor_num_per_layer = 2
        status = lldd_lib.lldd_pull_kv_cache(engine._engine(), index, cache, 0, -1, ext)
        assert status == LLMStatusCode.LLM_KV_CACHE_NOT_EXIST       # no local cache 1: after the lints
        thread.start()
        thread.join()
        assert seen_elsewhere == [0]
        assert lldd_lib.lldd_mock_lint_count() == 2
        assert [lldd_lib.lldd_mock_lint_rule(i) for i in range(3)] == [11, 1, 0]
        assert b"(PR-11)" in ffi.string(lldd_lib.lldd_mock_lint_text(0))
        assert b"(PR-1)" in ffi.string(lldd_lib.lldd_mock_lint_text(1))
    finally:
        lldd_lib.lldd_mock_lint_clear()
        engine.close()
    assert lldd_lib.lldd_mock_lint_count() == 0


def test_a_misspelt_option_key_of_the_native_api_warns_with_the_closest_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    engine = native.LlmDataDist(8, native.LlmRole.PROMPT)
    try:
        with pytest.warns(lint.UnknownOptionWarning, match=r"'llm.listenIpInfo' is not read \(did you mean "
                                                           r"'llm.ListenIpInfo'\?\)"):
            engine.initialize({native.OPTION_DEVICE_ID: "0", "llm.listenIpInfo": f"127.0.0.1:{vs.free_port()}",
                               "ge.graphRunMode": "1"})
    finally:
        engine.close()
    strict(monkeypatch)
    engine = native.LlmDataDist(8, native.LlmRole.PROMPT)
    try:
        with pytest.raises(LLMException, match=r"did you mean 'llm.EnableSwitchRole'"):
            engine.initialize({native.OPTION_DEVICE_ID: "0", "llm.EnableSwitchRol": "1"})
    finally:
        engine.close()


@pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions")
def test_a_misspelt_option_key_of_the_vendor_api_warns_with_the_closest_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_datadist_ffi.vendor import LLMDataDist, LLMRole
    lenient(monkeypatch)
    datadist = LLMDataDist(LLMRole.DECODER, 3)
    try:
        with pytest.warns(lint.UnknownOptionWarning, match=r"'llm.EnableCacheManagr' is not read \(did you mean "
                                                           r"'llm.EnableCacheManager'\?\)"):
            datadist.init({**vs.v2_options(), "llm.EnableCacheManagr": "1"})
    finally:
        datadist.finalize()
