"""llm_datadist_ffi.companion over a recording stand-in of the vendor's package
(tests/companion/standin: the vendor's module layout, names, signatures and exception,
written for these tests)."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, List, Tuple

import pytest

from llm_datadist_ffi import companion, lint
from llm_datadist_ffi._core import _lint_rules
from llm_datadist_ffi.testing import trace as trace_tools

STANDIN = Path(__file__).resolve().parent / "standin"
ROOT = Path(__file__).resolve().parents[2]
_NAMES = ("llm_datadist", "llm_datadist_v1")


def _purge() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in _NAMES:
            del sys.modules[name]


@pytest.fixture
def vendor(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The stand-in, freshly imported, with the companion installed over it."""
    from llm_datadist_ffi import compat
    if compat.is_installed():
        compat.uninstall()
    _purge()
    monkeypatch.syspath_prepend(str(STANDIN))
    monkeypatch.delenv(lint.STRICT_ENV, raising=False)
    module = importlib.import_module("llm_datadist")
    companion.install()
    try:
        yield module
    finally:
        companion.uninstall()
        module.LLMDataDist.llm_engine_instance = None
        _purge()


def _calls() -> List[Tuple[str, tuple, dict]]:
    return sys.modules["llm_datadist.v2.cache_manager"].CALLS


def _engine(vendor: ModuleType, **options: str) -> Any:
    engine = vendor.LLMDataDist(vendor.LLMRole.DECODER, 2)
    engine.init({"llm.EnableCacheManager": "1", **options})
    return engine


def _blocks_cache(vendor: ModuleType, manager: Any, blocks: int = 8, num_tensors: int = 4) -> Any:
    desc = vendor.CacheDesc(num_tensors, [blocks, 16, 8], vendor.DataType.DT_FLOAT16)
    return manager.register_blocks_cache(desc, [0x1000] * num_tensors, vendor.BlocksCacheKey(2, 0))


# ---- per rule: the warning, the strict refusal, the vendor call made or not ------------------

def _case_pr5(v: ModuleType, m: Any) -> Tuple[str, Callable[[], Any]]:
    cache = _blocks_cache(v, m)
    return "pull_blocks", lambda: m.pull_blocks(v.BlocksCacheKey(1, 0), cache, [0, 1], [3, 3])


def _case_pr2(v: ModuleType, m: Any) -> Tuple[str, Callable[[], Any]]:
    cache = _blocks_cache(v, m)
    return "pull_blocks", lambda: m.pull_blocks(v.BlocksCacheKey(1, 0), cache, [0], [1], src_layer_range=range(2, 2))


def _case_pr8(v: ModuleType, m: Any) -> Tuple[str, Callable[[], Any]]:
    cache = _blocks_cache(v, m)
    return "pull_blocks", lambda: m.pull_blocks(v.BlocksCacheKey(1, 0), cache, [0], [1], src_cache_offset=4)


def _case_pr3(v: ModuleType, m: Any) -> Tuple[str, Callable[[], Any]]:
    cache = _blocks_cache(v, m, num_tensors=2)
    return "push_blocks", lambda: m.push_blocks(v.BlocksCacheKey(1, 0), cache, [0], [1], tensor_num_per_layer=4)


def _case_pr18(v: ModuleType, m: Any) -> Tuple[str, Callable[[], Any]]:
    desc = v.CacheDesc(2, [4, 8], v.DataType.DT_FLOAT16, batch_dim_index=1)
    return "allocate_cache", lambda: m.allocate_cache(desc)


def _case_pr25(v: ModuleType, m: Any) -> Tuple[str, Callable[[], Any]]:
    cache = _blocks_cache(v, m)
    return "copy_blocks", lambda: m.copy_blocks(cache, {})


def _case_pr41(v: ModuleType, m: Any) -> Tuple[str, Callable[[], Any]]:
    return "remove_cache_key", lambda: m.remove_cache_key(v.CacheKey(1, 2 ** 64 - 1))


CASES = {"PR-5": _case_pr5, "PR-2": _case_pr2, "PR-8": _case_pr8, "PR-3": _case_pr3, "PR-18": _case_pr18,
         "PR-25": _case_pr25, "PR-41": _case_pr41}


@pytest.mark.rules("PR-2", "PR-3", "PR-5", "PR-8", "PR-18", "PR-25", "PR-41")
@pytest.mark.parametrize("rule", sorted(CASES))
def test_a_rule_warns_with_its_class_and_the_vendor_gets_the_same_objects(vendor: ModuleType, rule: str) -> None:
    manager = _engine(vendor).cache_manager
    method, call = CASES[rule](vendor, manager)
    before = len(_calls())
    with pytest.warns(lint.warning_class(rule), match=rule):
        call()
    made = [c for c in _calls()[before:] if c[0] == method]
    assert len(made) == 1


@pytest.mark.rules("PR-2", "PR-3", "PR-5", "PR-8", "PR-18", "PR-25", "PR-41")
@pytest.mark.parametrize("rule", sorted(CASES))
def test_strict_mode_raises_the_vendors_exception_and_makes_no_vendor_call(
        vendor: ModuleType, rule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = _engine(vendor).cache_manager
    method, call = CASES[rule](vendor, manager)
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    before = len(_calls())
    with pytest.raises(vendor.LLMException) as info:
        call()
    assert type(info.value) is vendor.LLMException
    assert info.value.status_code is vendor.LLMStatusCode.LLM_PARAM_INVALID
    assert f"({rule};" in str(info.value)
    assert [c for c in _calls()[before:] if c[0] == method] == []


def test_arguments_reach_the_vendor_as_the_same_objects_and_the_result_comes_back(vendor: ModuleType) -> None:
    manager = _engine(vendor).cache_manager
    desc = vendor.CacheDesc(2, [4, 8], vendor.DataType.DT_FLOAT16)
    addrs = [0x10, 0x20]
    keys = (vendor.CacheKey(1, 5),)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache = manager.register_cache(desc, addrs, keys)
    name, args, _ = _calls()[-1]
    assert name == "register_cache" and args[0] is desc and args[1] is addrs and args[2] is keys
    assert isinstance(cache, vendor.Cache) and cache.cache_desc is desc
    blocks = _blocks_cache(vendor, manager)
    src, dst = [0, 1], [2, 3]
    layers = range(0, 1)
    manager.pull_blocks(vendor.BlocksCacheKey(1, 0), blocks, src, dst, src_layer_range=layers)
    name, args, kwargs = _calls()[-1]
    assert args[2] is src and args[3] is dst and kwargs["src_layer_range"] is layers


def test_the_vendors_own_type_errors_come_first(vendor: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = _engine(vendor).cache_manager
    cache = _blocks_cache(vendor, manager)
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    with pytest.raises(TypeError, match="dst_blocks"):
        manager.pull_blocks(vendor.BlocksCacheKey(1, 0), cache, [0], "not a list")


def test_a_vendor_exception_gets_one_note_and_keeps_type_code_and_message(vendor: ModuleType) -> None:
    manager = _engine(vendor).cache_manager
    cache = _blocks_cache(vendor, manager)
    wrapper = sys.modules["llm_datadist.llm_datadist_wrapper"]
    wrapper.STATUS["pull_blocks"] = wrapper.kLLMNotYetLink
    with pytest.raises(vendor.LLMException) as info:
        manager.pull_blocks(vendor.BlocksCacheKey(1, 0), cache, [0], [1])
    exc = info.value
    assert type(exc) is vendor.LLMException
    assert exc.status_code is vendor.LLMStatusCode.LLM_NOT_YET_LINK
    assert str(exc) == "[pull_blocks] failed, error code is 1343270919"
    notes = [n for n in exc.__notes__ if n.startswith(companion.NOTE_PREFIX)]
    assert len(notes) == 1
    assert "LLM_NOT_YET_LINK (0x5010b007)" in notes[0] and "(recoverable)" in notes[0] and "Remedy:" in notes[0]


def test_nested_vendor_calls_count_once(vendor: ModuleType) -> None:
    """``pull_cache`` calls the wrapped static ``check_cache_key``: one note, not two."""
    manager = _engine(vendor).cache_manager
    desc = vendor.CacheDesc(2, [4, 8], vendor.DataType.DT_FLOAT16)
    cache = manager.register_cache(desc, [1, 2])
    assert isinstance(vendor.v2.cache_manager.CacheManager.__dict__["check_cache_key"], staticmethod)
    with pytest.raises(vendor.LLMException) as info:
        manager.pull_cache(vendor.CacheKey(1, -1), cache)
    assert len(info.value.__notes__) == 1
    with pytest.raises(vendor.LLMException) as direct:
        manager.check_cache_key(vendor.CacheKey(1, -1))
    assert len(direct.value.__notes__) == 1


def test_install_wraps_at_class_level_and_uninstall_restores_the_same_objects(vendor: ModuleType) -> None:
    companion.uninstall()
    classes = (vendor.LLMDataDist, sys.modules["llm_datadist.v2.cache_manager"].CacheManager)
    before = [dict(vars(cls)) for cls in classes]
    engine = _engine(vendor)                                      # made before install
    companion.install()
    companion.install()                                           # idempotent
    assert set(companion.wrapped_methods()) >= {"LLMDataDist.init", "CacheManager.pull_blocks",
                                                "CacheManager.check_cache_key", "LLMDataDist.link_clusters"}
    assert not any(m.startswith("KvCacheManager.") for m in companion.wrapped_methods())
    cache = _blocks_cache(vendor, engine.cache_manager)
    with pytest.warns(lint.warning_class("PR-5")):
        engine.cache_manager.pull_blocks(vendor.BlocksCacheKey(1, 0), cache, [0, 1], [2, 2])
    companion.uninstall()
    for cls, saved in zip(classes, before):
        now = vars(cls)
        assert set(now) == set(saved)
        assert all(now[name] is saved[name] for name in saved if name != "llm_engine_instance")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.cache_manager.pull_blocks(vendor.BlocksCacheKey(1, 0), cache, [0, 1], [2, 2])
    companion.install()


def test_v1_is_wrapped_when_the_vendor_imports_it_and_not_before(vendor: ModuleType) -> None:
    assert "llm_datadist_v1" not in sys.modules
    engine = vendor.LLMDataDist(vendor.LLMRole.DECODER, 2)
    engine.init({})                                                # v1 mode imports llm_datadist_v1
    assert "KvCacheManager.pull_blocks" in companion.wrapped_methods()
    kv = engine.kv_cache_manager
    desc = vendor.CacheDesc(2, [4, 8], vendor.DataType.DT_FLOAT16)
    with pytest.warns(lint.warning_class("PR-8"), match="src_cache_offset"):
        kv.pull_blocks(vendor.BlocksCacheKey(1, 0), vendor.KvCache(3, desc, [], True), [0], [1], src_cache_offset=1)
    assert vendor.KvCacheManager is sys.modules["llm_datadist_v1"].KvCacheManager


@pytest.mark.rules("PR-26", "OPT-1")
def test_init_options_lints(vendor: ModuleType) -> None:
    engine = vendor.LLMDataDist(vendor.LLMRole.DECODER, 2)
    with pytest.warns(lint.LintWarning) as caught:
        engine.init({"llm.EnableCacheManager": "1", "llm.SyncKvCacheWaitTime": "0", "llm.listenipinfo": "x"})
    assert sorted(w.message.rule for w in caught) == ["OPT-1", "PR-26"]   # type: ignore[union-attr]


def test_refuses_the_compat_alias() -> None:
    from llm_datadist_ffi import compat
    _purge()
    compat.install()
    try:
        with pytest.raises(ImportError, match="compat alias"):
            companion.install()
    finally:
        compat.uninstall()
    assert not companion.is_installed()


def _run(code: str, *, standin: bool = True, env: Any = None) -> subprocess.CompletedProcess[str]:
    path = [str(ROOT)] + ([str(STANDIN)] if standin else [])
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(path), **(env or {})}
    full.pop(lint.STRICT_ENV, None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120,
                          check=False)


def test_refuses_without_a_vendor_package_with_a_message_that_says_what_to_do() -> None:
    done = _run("from llm_datadist_ffi import companion\ncompanion.install()", standin=False)
    assert done.returncode == 1
    assert "ImportError: llm_datadist_ffi.companion: the vendor's llm_datadist package cannot be imported" \
        in done.stderr and "compat.install()" in done.stderr


_ON_A_DEVICE = """
import sys, warnings
warnings.simplefilter("ignore")
from llm_datadist_ffi import companion
companion.install()
import llm_datadist as v
e = v.LLMDataDist(v.LLMRole.DECODER, 2)
e.init({"llm.EnableCacheManager": "1"})
m = e.cache_manager
c = m.register_blocks_cache(v.CacheDesc(4, [8, 16], v.DataType.DT_FLOAT16), [1, 2, 3, 4])
m.pull_blocks(v.BlocksCacheKey(1, 0), c, [0, 1], [2, 2])
maps = open("/proc/self/maps").read()
print(sorted(n for n in sys.modules if n.startswith("llm_datadist_ffi")))
print("libllm_datadist_mock" in maps, "llm_datadist_ffi._capi" in sys.modules)
calls = sys.modules["llm_datadist.llm_datadist_wrapper"].CALLS
print([c[0] for c in calls])
"""


def test_the_companion_alone_loads_no_mock_and_exits_cleanly(tmp_path: Path) -> None:
    done = _run(_ON_A_DEVICE, env={"LLM_DATADIST_FFI_TRACE": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "False False"
    assert "calc_tensor_size" not in lines[2]               # the companion made no vendor call of its own
    assert done.stderr == ""                                 # the atexit finalize ran through the wrapper
    events = [e for e in trace_tools.read_events(tmp_path) if e.get("ph") == "X"]
    names = [e["name"] for e in events]
    assert names == ["LLMDataDist.init", "CacheManager.register_blocks_cache", "CacheManager.pull_blocks",
                     "LLMDataDist.finalize"]
    pull = events[2]["args"]
    # 2 blocks x 4 tensors x (16 elements x 2 bytes per block)
    assert pull["bytes"] == 2 * 4 * 16 * 2 and pull["bytes_computed"] is True and pull["status"] == "LLM_SUCCESS"
    assert "CacheManager.pull_blocks" in trace_tools.summary(tmp_path)


def test_trace_records_vendor_failures_and_link_statuses(vendor: ModuleType, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(companion, "_TRACER", companion._Tracer(str(tmp_path)))
    engine = _engine(vendor)
    wrapper = sys.modules["llm_datadist.llm_datadist_wrapper"]
    wrapper.STATUS["link_clusters"] = wrapper.kLinKFailed
    code, statuses = engine.link_clusters([vendor.LLMClusterInfo()], 1000)
    assert code is vendor.LLMStatusCode.LLM_LINK_FAILED
    wrapper.STATUS["pull_blocks"] = wrapper.kLLMTimeout
    cache = _blocks_cache(vendor, engine.cache_manager)
    with pytest.raises(vendor.LLMException):
        engine.cache_manager.pull_blocks(vendor.BlocksCacheKey(1, 0), cache, [0], [1])
    events = {e["name"]: e["args"] for e in trace_tools.read_events(tmp_path) if e.get("ph") == "X"}
    link = events["LLMDataDist.link_clusters"]
    assert link["status"] == "LLM_LINK_FAILED" and link["cluster_statuses"] == ["LLM_LINK_FAILED"]
    pull = events["CacheManager.pull_blocks"]
    assert pull["status"] == "LLM_TIMEOUT" and pull["status_code"] == 0x5010B01A and "bytes" not in pull
    assert json.dumps(pull)                                  # JSON as written


def test_every_device_rule_is_a_lint_rule_and_every_python_rule_is_classified() -> None:
    assert set(_lint_rules.DEVICE) == set(lint.RULES)
    fires = {rule for rule, why in _lint_rules.DEVICE.items() if not why}
    assert fires <= lint.PYTHON_RULES


def test_the_bench_row_measures_wrapped_against_unwrapped_in_the_same_run() -> None:
    from llm_datadist_ffi._tools import _bench_companion
    row = _bench_companion.measure(calls=200, batches=3)
    assert row["method"] == "CacheManager.pull_blocks" and row["blocks"] == 16
    assert row["us_cost"] == pytest.approx(row["us_wrapped"] - row["us_unwrapped"])
    assert 0 < row["us_unwrapped"] < row["us_wrapped"]        # the wrapper does work the method does not
    assert row["met"] == (row["us_cost"] <= 2.0)
    assert _bench_companion.line(row).startswith("companion: CacheManager.pull_blocks of 16 blocks costs ")
    assert not companion.is_installed()                       # measuring installs nothing


def test_the_statuses_of_an_async_transfer_are_traced_as_they_come_back(vendor: ModuleType, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(companion, "_TRACER", companion._Tracer(str(tmp_path)))
    manager = _engine(vendor).cache_manager
    cache = _blocks_cache(vendor, manager)
    configs = [vendor.TransferConfig(1, [1, 2]), vendor.TransferConfig(3, [1, 2])]
    task = manager.transfer_cache_async(cache, object(), configs)
    task._statuses[1] = vendor.LLMStatusCode.LLM_TIMEOUT
    assert task.get_results() == [vendor.LLMStatusCode.LLM_SUCCESS, vendor.LLMStatusCode.LLM_TIMEOUT]
    assert task.synchronize() is vendor.LLMStatusCode.LLM_SUCCESS
    events = {e["name"]: e["args"] for e in trace_tools.read_events(tmp_path) if e.get("ph") == "X"}
    assert events["CacheTask.get_results"]["results"] == ["LLM_SUCCESS", "LLM_TIMEOUT"]
    assert events["CacheTask.get_results"]["status"] == "LLM_TIMEOUT"
    assert events["CacheTask.synchronize"]["status"] == "LLM_SUCCESS"
    assert "CacheManager.transfer_cache_async" in events


def test_install_from_many_threads_wraps_once(vendor: ModuleType) -> None:
    import threading
    companion.uninstall()
    methods = vendor.v2.cache_manager.CacheManager.__dict__["pull_blocks"]
    barrier = threading.Barrier(8)

    def install() -> None:
        barrier.wait()
        companion.install()

    threads = [threading.Thread(target=install) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wrapped = companion.wrapped_methods()
    assert len(wrapped) == len(set(wrapped))
    assert vendor.v2.cache_manager.CacheManager.__dict__["pull_blocks"].__wrapped__ is methods
    manager = _engine(vendor).cache_manager
    cache = _blocks_cache(vendor, manager)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager.pull_blocks(vendor.BlocksCacheKey(1, 0), cache, [0, 1], [2, 2])
    assert [w.message.rule for w in caught] == ["PR-5"]       # type: ignore[union-attr]
