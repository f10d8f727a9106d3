"""The vendor module layout (docs/reference/python-api.md §1) and ``compat.install()``.

Everything that installs the ``llm_datadist`` name runs in a subprocess, so that the
test process's ``sys.modules`` never holds a module named ``llm_datadist``. The
subprocesses run in an empty directory, so they import the installed package.
"""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

import llm_datadist_ffi.vendor as vendor
from llm_datadist_ffi import data_type, status
from llm_datadist_ffi._vendor import configs
from llm_datadist_ffi._vendor.v1 import cache_manager as v1_cache_manager, tensor
from llm_datadist_ffi._vendor.v2 import cache_manager, llm_datadist, llm_types

VENDOR_ALL = ["LLMClusterInfo", "LLMStatusCode", "LLMException", "LLMRole", "LlmConfig", "LLMConfig", "DataType",
              "Status", "CacheDesc", "CacheKey", "CacheKeyByIdAndIndex", "KvCache", "Cache", "BlocksCacheKey",
              "LLMDataDist", "Placement", "RegisterMemStatus", "LayerSynchronizer", "TransferConfig", "CacheTask",
              "TransferWithCacheKeyConfig", "Memtype", "MemInfo"]
LAZY = ["TensorDesc", "Tensor", "KvCacheManager"]


def run_python(code: str, cwd: Path, env: Optional[dict[str, str]] = None) -> str:
    """Run ``code`` in a fresh interpreter; return its stdout (it must exit 0)."""
    environment = {k: v for k, v in os.environ.items() if k != "AUTO_USE_UC_MEMORY"}
    environment.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


# ---------------------------------------------------------------------------
# The vendor module (python-api.md §1.2), in process: no llm_datadist name involved
# ---------------------------------------------------------------------------


def test_vendor_all_is_the_vendors_export_list_plus_the_lazy_names() -> None:
    assert vendor.__all__ == VENDOR_ALL + LAZY


@pytest.mark.parametrize("name", VENDOR_ALL + LAZY)
def test_every_vendor_export_resolves(name: str) -> None:
    assert getattr(vendor, name) is not None


def test_vendor_exports_are_the_package_classes() -> None:
    assert vendor.LLMConfig is vendor.LlmConfig is configs.LlmConfig
    assert vendor.LLMClusterInfo is configs.LLMClusterInfo and vendor.LLMRole is configs.LLMRole
    assert vendor.LLMStatusCode is status.LLMStatusCode
    assert vendor.LLMException is status.LLMException and vendor.Status is status.Status
    assert vendor.DataType is data_type.DataType
    for name in ("CacheDesc", "CacheKey", "CacheKeyByIdAndIndex", "KvCache", "Cache", "BlocksCacheKey",
                 "Placement", "RegisterMemStatus", "LayerSynchronizer", "TransferConfig", "CacheTask",
                 "TransferWithCacheKeyConfig", "Memtype", "MemInfo"):
        assert getattr(vendor, name) is getattr(llm_types, name)
    assert vendor.LLMDataDist is llm_datadist.LLMDataDist


def test_lazy_names_resolve_to_the_package_classes() -> None:
    assert vendor.TensorDesc is tensor.TensorDesc
    assert vendor.Tensor is tensor.Tensor
    assert vendor.KvCacheManager is v1_cache_manager.KvCacheManager


def test_unknown_vendor_attribute_raises_the_vendors_attribute_error() -> None:
    with pytest.raises(AttributeError) as info:
        vendor.NoSuchName  # noqa: B018
    assert str(info.value) == "Module 'llm_datadist' has no attribute 'NoSuchName'"


def test_vendor_has_its_submodules_as_attributes() -> None:
    assert vendor.status is status and vendor.configs is configs and vendor.data_type is data_type
    assert vendor.v2.llm_types is llm_types


def test_llm_datadist_class_is_an_ordinary_attribute_with_no_engine_instance() -> None:
    assert "LLMDataDist" in vars(vendor)
    assert isinstance(vendor.LLMDataDist, type)
    assert vendor.LLMDataDist.llm_engine_instance is None


# ---------------------------------------------------------------------------
# Submodules (python-api.md §1.3)
# ---------------------------------------------------------------------------


def test_status_module_holds_the_status_names() -> None:
    for name in ("LLMStatusCode", "LLMException", "Status"):
        assert isinstance(getattr(status, name), type)


def test_configs_module_holds_role_cluster_info_and_config() -> None:
    for name in ("LLMRole", "LLMClusterInfo", "LlmConfig"):
        assert isinstance(getattr(configs, name), type)


def test_data_type_module_has_the_lazy_numpy_tables_of_the_spec() -> None:
    dt = data_type.DataType
    table = data_type.dtype_to_np_dtype
    assert table == {dt.DT_FLOAT: np.float32, dt.DT_FLOAT16: np.float16, dt.DT_INT8: np.int8,
                     dt.DT_INT32: np.int32, dt.DT_UINT8: np.uint8, dt.DT_INT16: np.int16,
                     dt.DT_UINT16: np.uint16, dt.DT_UINT32: np.uint32, dt.DT_INT64: np.int64,
                     dt.DT_UINT64: np.uint64, dt.DT_DOUBLE: np.double, dt.DT_BOOL: np.bool_,
                     dt.DT_STRING: np.bytes_, dt.DT_BF16: np.float16}
    assert data_type.valid_np_dtypes == list(table.values())
    reverse = data_type.np_dtype_to_dtype
    assert reverse[np.float16] is dt.DT_FLOAT16
    assert dt.DT_BF16 not in reverse.values()
    assert len(reverse) == 13


def test_v2_engine_modules_hold_their_classes() -> None:
    assert isinstance(llm_datadist.LLMDataDist, type)
    assert isinstance(cache_manager.CacheManager, type)


# ---------------------------------------------------------------------------
# Import side effect and laziness, in fresh interpreters
# ---------------------------------------------------------------------------


def test_importing_the_vendor_module_sets_auto_use_uc_memory_to_0(tmp_path: Path) -> None:
    out = run_python("""
        import os
        import llm_datadist_ffi.vendor
        print(os.environ["AUTO_USE_UC_MEMORY"])
    """, tmp_path)
    assert out == "0\n"


def test_importing_the_vendor_module_keeps_a_set_auto_use_uc_memory(tmp_path: Path) -> None:
    out = run_python("""
        import os
        import llm_datadist_ffi.vendor
        print(os.environ["AUTO_USE_UC_MEMORY"])
    """, tmp_path, {"AUTO_USE_UC_MEMORY": "1"})
    assert out == "1\n"


def test_lazy_names_are_not_imported_before_first_access(tmp_path: Path) -> None:
    out = run_python("""
        import sys
        import llm_datadist_ffi.vendor as v
        before = ["Tensor" in vars(v), "llm_datadist_ffi._vendor.v1.tensor" in sys.modules]
        v.Tensor
        after = ["Tensor" in vars(v), "llm_datadist_ffi._vendor.v1.tensor" in sys.modules]
        print(before, after)
    """, tmp_path)
    assert out == "[False, False] [True, True]\n"


def test_without_install_nothing_named_llm_datadist_is_touched(tmp_path: Path) -> None:
    out = run_python("""
        import os, sys
        import llm_datadist_ffi, llm_datadist_ffi._vendor.configs, llm_datadist_ffi._vendor.v2.llm_types
        import llm_datadist_ffi.compat as compat
        names = [n for n in sys.modules if n == "llm_datadist" or n.startswith("llm_datadist.")]
        print(names, compat.is_installed(), "AUTO_USE_UC_MEMORY" in os.environ)
    """, tmp_path)
    assert out == "[] False False\n"


# ---------------------------------------------------------------------------
# compat.install(), in fresh interpreters
# ---------------------------------------------------------------------------

CLIENT_SCRIPT = """
    import llm_datadist_ffi.compat
    llm_datadist_ffi.compat.install()

    # ---- from here on, only the vendor's documented API ----
    import json
    from unittest.mock import patch

    import llm_datadist
    from llm_datadist import (CacheKey, CacheKeyByIdAndIndex, DataType, LLMClusterInfo, LLMConfig, LLMException,
                              LLMRole, LLMStatusCode, Placement)
    from llm_datadist.v2.llm_types import BlocksCacheKey, Cache, CacheDesc, RegisterMemStatus

    results = {}

    config = LLMConfig()
    config.device_id = 0
    config.sync_kv_timeout = 5000
    config.enable_cache_manager = True
    config.enable_remote_cache_accessible = True
    config.listen_ip_info = "127.0.0.1:26000"
    options = config.generate_options()
    options["llm.RdmaServiceLevel"] = "4"
    results["options"] = options

    num_layers = 4
    kv_desc = CacheDesc(num_tensors=2 * num_layers, shape=[128, 16, 8, 128], data_type=DataType.DT_BF16)
    results["desc"] = [kv_desc.num_tensors, kv_desc.shape, kv_desc.size, str(kv_desc.placement)]
    key = BlocksCacheKey(cluster_id=1, model_id=0)
    results["key"] = [key.cluster_id, key.prompt_cluster_id, key.model_id]

    info = LLMClusterInfo()
    info.remote_cluster_id = 2
    info.append_local_ip_info("127.0.0.1", 0)
    info.append_remote_ip_info("127.0.0.1", 26000)
    results["cluster"] = [info.remote_cluster_id, info.local_ip_info_list, info.remote_ip_info_list]

    def outcome(call):
        try:
            call()
        except (TypeError, ValueError) as exc:
            return "bad arguments: " + type(exc).__name__
        except LLMException as exc:
            return "llm error: " + str(exc.status_code)
        return "ok"

    results["errors"] = [
        outcome(lambda: CacheDesc(1, [4, 4], 1)),
        outcome(lambda: CacheKey(prompt_cluster_id=-1, req_id=1)),
        outcome(lambda: CacheDesc(1, [], DataType.DT_FLOAT)),
        outcome(lambda: CacheKeyByIdAndIndex(1, 2, 3)),
    ]
    retryable = [LLMStatusCode.LLM_TIMEOUT, LLMStatusCode.LLM_LINK_FAILED]
    results["codes"] = [int(LLMStatusCode.LLM_PARAM_INVALID), LLMStatusCode.LLM_TIMEOUT in retryable,
                        LLMRole.PROMPT.name, DataType.DT_FLOAT16.value, RegisterMemStatus.OK.name]
    cpu = Cache.create_cpu_cache(CacheDesc(2, [4, 8], DataType.DT_FLOAT16, Placement.HOST), [4096, 8192])
    results["cpu_cache"] = [cpu.cache_id, cpu.is_blocks_cache, cpu.tensor_addrs]

    with patch("llm_datadist.LLMDataDist") as fake:
        engine = llm_datadist.LLMDataDist(LLMRole.DECODER, 7)
        engine.init(options)
        fake.assert_called_once_with(LLMRole.DECODER, 7)
        engine.init.assert_called_once_with(options)
    results["patched"] = True
    print(json.dumps(results))
"""


def test_a_client_script_written_against_the_vendor_api_runs_unchanged(tmp_path: Path) -> None:
    results = json.loads(run_python(CLIENT_SCRIPT, tmp_path))
    assert results == {
        "options": {"ge.exec.deviceId": "0", "ge.session_device_id": "0", "llm.SyncKvCacheWaitTime": "5000",
                    "llm.EnableCacheManager": "1", "llm.EnableRemoteCacheAccessible": "1",
                    "llm.listenIpInfo": "127.0.0.1:26000", "llm.MemoryUtilization": "0.95",
                    "llm.RdmaServiceLevel": "4"},
        "desc": [8, [128, 16, 8, 128], 128 * 16 * 8 * 128 * 2, "Placement.DEVICE"],
        "key": [1, 1, 0],
        "cluster": [2, [[16777343, 0]], [[16777343, 26000]]],
        "errors": ["bad arguments: TypeError", "bad arguments: ValueError", "llm error: LLMStatusCode.LLM_PARAM_INVALID",
                   "ok"],
        "codes": [0x5010B005, True, "PROMPT", 1, "OK"],
        "cpu_cache": [-1, True, [4096, 8192]],
        "patched": True,
    }


def test_install_gives_the_same_class_objects_through_every_path(tmp_path: Path) -> None:
    out = run_python("""
        import llm_datadist_ffi.compat as compat
        compat.install()
        import llm_datadist, llm_datadist.status, llm_datadist.configs, llm_datadist.data_type
        import llm_datadist.v2.llm_types, llm_datadist.v2.llm_datadist, llm_datadist.v2.cache_manager
        from llm_datadist.v2.llm_types import BlocksCacheKey, CacheDesc
        import llm_datadist_ffi._vendor.v2.llm_types as own_types
        import llm_datadist_ffi.status as own_status
        import llm_datadist_ffi._vendor.configs as own_configs
        import llm_datadist_ffi.data_type as own_data_type
        import llm_datadist_ffi._vendor.v2.cache_manager as own_cache_manager
        import llm_datadist_ffi._vendor.v1.cache_manager as own_v1_cache_manager
        import llm_datadist_ffi._vendor.v2.llm_datadist as own_llm_datadist
        import llm_datadist_ffi.vendor as own_vendor
        checks = [
            llm_datadist is own_vendor,
            CacheDesc is llm_datadist.CacheDesc is llm_datadist.v2.llm_types.CacheDesc is own_types.CacheDesc,
            BlocksCacheKey is own_types.BlocksCacheKey,
            llm_datadist.status.LLMStatusCode is llm_datadist.LLMStatusCode is own_status.LLMStatusCode,
            llm_datadist.status.LLMException is own_status.LLMException,
            llm_datadist.configs.LlmConfig is llm_datadist.LLMConfig is own_configs.LlmConfig,
            llm_datadist.data_type.DataType is llm_datadist.DataType is own_data_type.DataType,
            llm_datadist.v2.llm_datadist.LLMDataDist is llm_datadist.LLMDataDist is own_llm_datadist.LLMDataDist,
            llm_datadist.v2.cache_manager.CacheManager is own_cache_manager.CacheManager,
            llm_datadist.KvCacheManager is own_v1_cache_manager.KvCacheManager,
            llm_datadist.v2.llm_types.__name__ == "llm_datadist_ffi._vendor.v2.llm_types",
        ]
        print(checks)
    """, tmp_path)
    assert out == "[True, True, True, True, True, True, True, True, True, True, True]\n"


def test_install_is_idempotent(tmp_path: Path) -> None:
    out = run_python("""
        import sys
        import llm_datadist_ffi.compat as compat
        compat.install()
        first = {n: id(m) for n, m in sys.modules.items() if n.split(".")[0] == "llm_datadist"}
        compat.install()
        second = {n: id(m) for n, m in sys.modules.items() if n.split(".")[0] == "llm_datadist"}
        print(first == second, sorted(first), sum(f is compat._FINDER for f in sys.meta_path), compat.is_installed())
    """, tmp_path)
    assert out == ("True ['llm_datadist', 'llm_datadist.configs', 'llm_datadist.data_type', "
                   "'llm_datadist.status', 'llm_datadist.v2', 'llm_datadist.v2.cache_manager', "
                   "'llm_datadist.v2.llm_datadist', 'llm_datadist.v2.llm_types'] 1 True\n")


def test_from_llm_datadist_import_star_gives_every_export(tmp_path: Path) -> None:
    out = run_python("""
        import llm_datadist_ffi.compat as compat
        compat.install()
        namespace = {}
        exec("from llm_datadist import *", namespace)
        print(sorted(k for k in namespace if not k.startswith("__")))
    """, tmp_path)
    assert out == repr(sorted(VENDOR_ALL + LAZY)) + "\n"


def test_uninstall_removes_every_llm_datadist_name_and_the_finder(tmp_path: Path) -> None:
    out = run_python("""
        import sys
        import llm_datadist_ffi.compat as compat
        compat.install()
        import llm_datadist.v2.llm_types
        compat.uninstall()
        compat.uninstall()
        names = [n for n in sys.modules if n.split(".")[0] == "llm_datadist"]
        try:
            import llm_datadist
            again = "imported"
        except ModuleNotFoundError:
            again = "not found"
        compat.install()
        import llm_datadist
        print(names, compat._FINDER in sys.meta_path, again, llm_datadist.__name__)
    """, tmp_path)
    assert out == "[] True not found llm_datadist_ffi.vendor\n"


def test_install_refuses_to_replace_a_foreign_llm_datadist(tmp_path: Path) -> None:
    out = run_python("""
        import sys, types
        import llm_datadist_ffi.compat as compat
        foreign = types.ModuleType("llm_datadist")
        sys.modules["llm_datadist"] = foreign
        try:
            compat.install()
            outcome = "installed"
        except ImportError as exc:
            outcome = "ImportError: " + ("already imported" in str(exc)).__repr__()
        names = sorted(n for n in sys.modules if n.split(".")[0] == "llm_datadist")
        print(outcome, sys.modules["llm_datadist"] is foreign, names, compat.is_installed())
    """, tmp_path)
    assert out == "ImportError: True True ['llm_datadist'] False\n"


def test_finder_re_aliases_a_removed_vendor_module_without_a_second_copy(tmp_path: Path) -> None:
    out = run_python("""
        import sys
        import llm_datadist_ffi.compat as compat
        compat.install()
        import llm_datadist_ffi._vendor.v2.cache_manager as own
        del sys.modules["llm_datadist.v2.cache_manager"]
        import llm_datadist.v2.cache_manager as again
        try:
            import llm_datadist.v2.no_such_module
            missing = "imported"
        except ModuleNotFoundError:
            missing = "not found"
        print(again is own, own.__spec__.name, missing)
    """, tmp_path)
    assert out == "True llm_datadist_ffi._vendor.v2.cache_manager not found\n"


def test_unknown_attribute_of_installed_llm_datadist_raises_the_vendor_text(tmp_path: Path) -> None:
    out = run_python("""
        import llm_datadist_ffi.compat as compat
        compat.install()
        import llm_datadist
        try:
            llm_datadist.Nope
        except AttributeError as exc:
            print(exc)
    """, tmp_path)
    assert out == "Module 'llm_datadist' has no attribute 'Nope'\n"


def test_v2_list_is_the_vendors_list_of_current_generation_names() -> None:
    assert vendor.v2_list == VENDOR_ALL
    assert "v2_list" not in vendor.__all__


def test_configs_trans_str_ip_parses_text_as_inet_aton_and_passes_other_values() -> None:
    assert configs.trans_str_ip("1.2.3.4") == 0x04030201
    assert configs.trans_str_ip("127.1") == 0x0100007F
    assert configs.trans_str_ip(16777343) == 16777343
    assert configs.trans_str_ip(None) is None
    with pytest.raises(RuntimeError, match=r"^Can not parse ip str:no\.such\.host$"):
        configs.trans_str_ip("no.such.host")


def test_llm_types_check_layer_range_takes_the_name_first_as_the_vendors_helper() -> None:
    assert list(inspect.signature(llm_types.check_layer_range).parameters) == ["name", "layer_range", "allow_none"]
    assert llm_types.check_layer_range("src_layer_range", None) is None
    assert llm_types.check_layer_range("src_layer_range", range(2, 5)) is None
    with pytest.raises(TypeError, match="dst_layer_range"):
        llm_types.check_layer_range("dst_layer_range", None, allow_none=False)
    with pytest.raises(status.LLMException, match="dst_layer_range") as info:
        llm_types.check_layer_range("dst_layer_range", range(3, 1))
    assert info.value.status_code == 0x5010B005


def test_installed_llm_datadist_is_a_package_whose_unknown_submodules_are_not_found(tmp_path: Path) -> None:
    out = run_python("""
        import llm_datadist_ffi.compat as compat
        compat.install()
        import llm_datadist
        from llm_datadist import v2_list
        outcomes = []
        for name in ("llm_datadist.utils", "llm_datadist.utils.utils", "llm_datadist.llm_datadist_wrapper"):
            try:
                __import__(name)
                outcomes.append("imported")
            except ModuleNotFoundError as exc:
                outcomes.append(exc.name)
        print(hasattr(llm_datadist, "__path__"), len(v2_list), outcomes)
    """, tmp_path)
    assert out == "True 23 ['llm_datadist.utils', 'llm_datadist.utils', 'llm_datadist.llm_datadist_wrapper']\n"


def test_the_vendor_tiers_own_modules_are_not_vendor_submodules(tmp_path: Path) -> None:
    # The tier's own modules (llm_datadist_ffi._vendor: v1/, the shared helpers) are no
    # vendor module names: none is found, or run a second time, under llm_datadist.
    out = run_python("""
        import sys
        import llm_datadist_ffi.compat as compat
        compat.install()
        import llm_datadist
        outcomes = []
        for name in ("llm_datadist.v1", "llm_datadist.v1.cache_manager", "llm_datadist._options",
                     "llm_datadist._managers", "llm_datadist._native", "llm_datadist.v2._no_such"):
            try:
                __import__(name)
                outcomes.append("imported")
            except ModuleNotFoundError as exc:
                outcomes.append(exc.name)
        twice = sorted(n for n in sys.modules if n.startswith("llm_datadist.") and sys.modules[n].__name__ == n)
        print(bool(llm_datadist.__path__), outcomes, twice)
    """, tmp_path)
    assert out == ("False ['llm_datadist.v1', 'llm_datadist.v1', 'llm_datadist._options', 'llm_datadist._managers', "
                   "'llm_datadist._native', 'llm_datadist.v2._no_such'] []\n")


def test_the_vendors_import_pattern_of_v2_list_fills_a_namespace(tmp_path: Path) -> None:
    out = run_python("""
        import llm_datadist_ffi.compat as compat
        compat.install()
        import llm_datadist as ld
        from llm_datadist import v2_list
        namespace = {item: getattr(ld, item) for item in v2_list}
        import llm_datadist_ffi._vendor.v2.llm_types as own
        print(namespace["CacheDesc"] is own.CacheDesc, sorted(namespace) == sorted(v2_list))
    """, tmp_path)
    assert out == "True True\n"
