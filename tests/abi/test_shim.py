"""The ascend shim, built against the vendor double exactly as on an Ascend host.

These tests do not depend on the live backend: they build a fake toolkit
(``tests/vendor_double/build_toolkit.py``), compile the shim against it with the
flags of ``docs/reference/cpp-api.md`` §8.4, and check the result from the outside -- its
exports and dependencies, the double's conformance to the C++ spec, and a raw-cffi
smoke run (``tests/vendor_double/smoke.py``) in a process with the toolkit's
environment. The package's own tests run through the shim in ``.ci/run``
(``tests/vendor_double/ci_stage.sh``, backend ``ascend``).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = ROOT / "tests" / "vendor_double"
SHIM_SOURCE = ROOT / "llm_datadist_ffi" / "_shim" / "lldd_shim.cpp"
UMBRELLA = ROOT / "include" / "llm_datadist_ffi.h"
CXX = os.environ.get("CXX", "") or "g++"

pytestmark = pytest.mark.skipif(shutil.which(CXX.split()[0]) is None, reason=f"no C++ compiler ({CXX})")


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_lldd_test_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_shim = _load(ROOT / "llm_datadist_ffi" / "_shim" / "build_shim.py")
build_toolkit = _load(DOUBLE / "build_toolkit.py")


def api_functions() -> set[str]:
    """The functions the C ABI declares: every fragment the umbrella header includes."""
    names: set[str] = set()
    for fragment in re.findall(r'^#include "(lldd/\w+\.h)"', UMBRELLA.read_text(), flags=re.M):
        text = re.sub(r"/\*.*?\*/", "", (UMBRELLA.parent / fragment).read_text(), flags=re.S)
        names |= set(re.findall(r"(lldd_\w+)\s*\(", text))
    return names


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def toolkit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(build_toolkit.build(tmp_path_factory.mktemp("double") / "toolkit"))


@pytest.fixture(scope="module")
def shim(toolkit: Path) -> Path:
    return Path(build_shim.build(toolkit, toolkit.parent / "shim"))


@pytest.fixture
def clean_toolkit_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in (build_shim.OVERRIDE_ENV, *build_shim.TOOLKIT_ENVS):
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


# ---- the fake toolkit ---------------------------------------------------------------------------

def test_fake_toolkit_has_the_layout_and_set_env_contract_of_a_real_one(toolkit: Path) -> None:
    for rel in ("include/llm_datadist/llm_datadist.h", "include/external/ge_common/api_error_codes.h",
                "include/external/graph/ascend_string.h", "include/external/graph/types.h",
                "lib64/libllm_datadist.so", "lib64/libmetadef.so"):
        assert (toolkit / rel).is_file(), rel
    acl = toolkit / "lib64" / "libacl_rt.so"
    assert acl.is_symlink() and acl.resolve().name == "libllm_datadist_mock.so"
    shown = run(["bash", "-c", f". {toolkit / 'set_env.sh'} && echo $ASCEND_HOME_PATH && "
                 "echo $ASCEND_TOOLKIT_HOME && echo $LD_LIBRARY_PATH"],
                env={"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": "/x"})
    assert shown.stdout.split() == [str(toolkit), str(toolkit), f"{toolkit}/lib64:/x"]


def test_vendor_double_conforms_to_the_cpp_api_spec(toolkit: Path, tmp_path: Path) -> None:
    exe = tmp_path / "double_check"
    env = build_toolkit.toolkit_env(toolkit)
    built = run([*CXX.split(), "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=0", "-Wall", "-Wextra", "-Werror",
                 f"-I{toolkit / 'include'}", f"-I{toolkit / 'include' / 'external'}",
                 str(ROOT / "tests" / "cpp" / "programs" / "conformance.cpp"), "-o", str(exe), f"-L{toolkit / 'lib64'}",
                 "-lllm_datadist", "-lmetadef"], env=env)
    assert built.returncode == 0, built.stdout
    result = run([str(exe), str(free_port())], env=env)
    assert result.returncode == 0 and "double check: OK" in result.stdout, result.stdout


# ---- the shim as a library ----------------------------------------------------------------------

def test_shim_exports_exactly_the_functions_of_the_c_abi(shim: Path) -> None:
    # Defined in the shim itself: a name resolved through its dependencies (the
    # double's mock exports the same names) would silently be the mock's.
    nm = run(["nm", "-D", "--defined-only", str(shim)])
    exported = {line.split()[-1] for line in nm.stdout.splitlines() if " T " in line}
    declared = api_functions()
    assert len(declared) >= 21            # a parser that found nothing would make this vacuous
    assert exported == declared


def test_shim_depends_on_the_vendor_libraries_only(shim: Path) -> None:
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run(["readelf", "-d", str(shim)]).stdout))
    assert {"libllm_datadist.so", "libmetadef.so"} <= needed
    vendor_or_system = re.compile(r"^(libllm_datadist|libmetadef|libstdc\+\+|libgcc_s|libc|libm|libdl|ld-linux.*)"
                                  r"(\.so.*)$")
    assert [n for n in needed if not vendor_or_system.match(n)] == []


def test_shim_source_includes_only_the_vendor_header_the_c_abi_and_system_headers() -> None:
    includes = re.findall(r'^#include\s+([<"][^>"]+[>"])', SHIM_SOURCE.read_text(), flags=re.M)
    quoted = sorted(i for i in includes if i.startswith('"'))
    assert quoted == ['"llm_datadist/llm_datadist.h"', '"llm_datadist_ffi.h"']
    assert not any("acl" in i for i in includes)   # docs/reference/acl.md §5.1: never the ACL fragment or headers


def test_shim_builds_with_exactly_the_documented_host_flags(toolkit: Path, tmp_path: Path) -> None:
    out = tmp_path / "bare.so"
    cmd = build_shim.command(toolkit, out, extra_flags=False)
    assert cmd[1:6] == ["-std=c++17", "-O2", "-fPIC", "-shared", "-D_GLIBCXX_USE_CXX11_ABI=0"]
    assert "-Werror" in cmd and "-Wl,--no-undefined" in cmd
    assert not {"-fvisibility=hidden", "-ldl"} & set(cmd)
    result = run(cmd, env=build_toolkit.toolkit_env(toolkit))
    assert result.returncode == 0 and result.stdout == "", result.stdout


def smoke(toolkit: Path, shim: Path, *flags: str, env: dict[str, str] | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess[str]:
    mock = (toolkit / "lib64" / "libacl_rt.so").resolve()
    return run([sys.executable, str(DOUBLE / "smoke.py"), str(shim), "--mock-lib", str(mock), *flags],
               env=env or build_toolkit.toolkit_env(toolkit), timeout=timeout)


def test_shim_smoke_through_raw_cffi(toolkit: Path, shim: Path) -> None:
    result = smoke(toolkit, shim)
    assert result.returncode == 0 and "shim smoke: OK" in result.stdout, result.stdout


def test_mock_symbols_are_not_reachable_through_the_shim(toolkit: Path, shim: Path) -> None:
    # As on a device: a name the shim does not define is missing, never the mock's.
    code = ("import ctypes, sys; ctypes.CDLL('libacl_rt.so'); lib = ctypes.CDLL(sys.argv[1]); "
            "print(hasattr(lib, 'lldd_pull_kv_blocks'), hasattr(lib, 'lldd_mock_inject_fault'))")
    result = run([sys.executable, "-c", code, str(shim)], env=build_toolkit.toolkit_env(toolkit))
    assert result.stdout.split() == ["True", "False"], result.stdout


def test_shim_finds_the_runtime_message_when_the_vendor_library_links_the_runtime(tmp_path: Path) -> None:
    # The device layout: libllm_datadist.so depends on libacl_rt.so, so the shim's
    # dlsym(RTLD_DEFAULT, "aclGetRecentErrMsg") finds it in its own lookup scope.
    root = Path(build_toolkit.build(tmp_path / "toolkit", link_acl=True))
    assert "libacl_rt.so" in run(["readelf", "-d", str(root / "lib64" / "libllm_datadist.so")]).stdout
    result = smoke(root, Path(build_shim.build(root, tmp_path / "shim")))
    assert result.returncode == 0 and "shim smoke: OK" in result.stdout, result.stdout


@pytest.mark.slow
def test_shim_smoke_is_clean_under_asan_and_ubsan(tmp_path: Path) -> None:
    root = Path(build_toolkit.build(tmp_path / "toolkit", sanitize=True))
    shim = Path(build_shim.build(root, tmp_path / "shim", sanitize=True))
    assert "libasan" in run(["readelf", "-d", str(shim)]).stdout
    runtimes = [run([*CXX.split(), f"-print-file-name={lib}"]).stdout.strip() for lib in ("libasan.so", "libubsan.so")]
    env = build_toolkit.toolkit_env(root)
    env.update(LD_PRELOAD=" ".join(runtimes),
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    # ASan's operator new reports an impossible allocation and aborts instead of
    # throwing std::bad_alloc, so that one check runs in the plain build only.
    result = smoke(root, shim, "--no-bad-alloc", env=env, timeout=600)
    assert result.returncode == 0 and "shim smoke: OK" in result.stdout, result.stdout
    assert "runtime error" not in result.stdout and "ERROR: AddressSanitizer" not in result.stdout


# ---- build_shim.py --------------------------------------------------------------------------------

def test_toolkit_root_is_none_without_a_toolkit(clean_toolkit_env: pytest.MonkeyPatch) -> None:
    assert build_shim.find_toolkit_root() is None


def test_toolkit_root_follows_the_documented_order(clean_toolkit_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    clean_toolkit_env.setenv("ASCEND_TOOLKIT_HOME", str(c))
    assert build_shim.find_toolkit_root() == c
    clean_toolkit_env.setenv("ASCEND_HOME_PATH", str(b))
    assert build_shim.find_toolkit_root() == b
    clean_toolkit_env.setenv(build_shim.OVERRIDE_ENV, str(a))
    assert build_shim.find_toolkit_root() == a


def test_stale_toolkit_variables_are_ignored_but_a_bad_override_is_an_error(
        clean_toolkit_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_toolkit_env.setenv("ASCEND_HOME_PATH", str(tmp_path / "gone"))
    assert build_shim.find_toolkit_root() is None
    clean_toolkit_env.setenv(build_shim.OVERRIDE_ENV, str(tmp_path / "gone"))
    with pytest.raises(build_shim.ShimBuildError, match=build_shim.OVERRIDE_ENV):
        build_shim.find_toolkit_root()


def test_older_toolkits_link_graph_base_and_graph_instead_of_metadef(tmp_path: Path) -> None:
    (tmp_path / "libgraph_base.so").touch()
    (tmp_path / "libgraph.so").touch()
    assert build_shim.ascend_string_libs(tmp_path) == ["-lgraph_base", "-lgraph"]
    (tmp_path / "libmetadef.so").touch()
    assert build_shim.ascend_string_libs(tmp_path) == ["-lmetadef"]


def test_a_toolkit_without_llm_datadist_is_reported_not_half_built(tmp_path: Path) -> None:
    (tmp_path / "lib64").mkdir()
    out = tmp_path / "out"
    with pytest.raises(build_shim.ShimBuildError, match="llm_datadist/llm_datadist.h is missing"):
        build_shim.build(tmp_path, out)
    assert list(out.iterdir()) == []
