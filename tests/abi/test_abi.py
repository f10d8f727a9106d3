"""ABI guards: what cffi declares is what the C side compiles and exports.

The declarations come from the header fragments (one source); these tests make sure
that the libraries really export every declared function, and that the C compiler
and cffi agree on every struct's size and field offsets and on every constant.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

import llm_datadist_ffi
from llm_datadist_ffi import _capi, _cdef, mock_control
from llm_datadist_ffi._loader import const, ffi, lldd_lib, loaded

INCLUDE = _cdef.include_dir()
REPO = Path(__file__).resolve().parents[2]


def declared_functions(fragment: str) -> list[str]:
    text = (INCLUDE / fragment).read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    names = []
    for statement in text.split(";"):
        statement = " ".join(statement.split())
        if "(" not in statement or statement.startswith(("typedef", "enum", "struct")) or "{" in statement:
            continue
        names.append(re.search(r"(\w+)\s*\(", statement).group(1))  # type: ignore[union-attr]
    return names


def test_fragments_declare_the_expected_number_of_functions() -> None:
    # A parser that silently found nothing would make the export test vacuous.
    assert len(declared_functions("lldd/api.h")) == 21
    assert len(declared_functions("lldd/ext.h")) == 18
    assert len(declared_functions("acl/api.h")) == 24
    assert len(declared_functions("lldd/mock.h")) == 19      # lint record, link reasons, paths (link, last transfer), link model, bytes, bench floor


@pytest.mark.parametrize("fragment", ["lldd/api.h", "lldd/ext.h", "lldd/mock.h", "acl/api.h"])
def test_every_declared_function_is_exported(fragment: str) -> None:
    if llm_datadist_ffi.backend != "mock" and fragment not in ("lldd/api.h", "lldd/ext.h"):
        lib_path = loaded.acl_path if fragment == "acl/api.h" else None
        if lib_path is None:
            pytest.skip("the ascend shim does not export the mock control interface (by design)")
    else:
        lib_path = loaded.lldd_path
    lib = ctypes.CDLL(lib_path)
    missing = [name for name in declared_functions(fragment) if not hasattr(lib, name)]
    assert missing == []


def _struct_fields(name: str) -> list[str]:
    return [field for field, _ in ffi.typeof(name).fields]


STRUCTS = ["lldd_option", "lldd_ip_info", "lldd_cluster_info", "lldd_cache_desc", "lldd_cache",
           "lldd_cache_index", "lldd_ext_param", "lldd_key"]


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """sizeof/offsetof/constant values as the C compiler sees them."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "a C compiler is needed for the ABI layout test"
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "llm_datadist_ffi_mock.h"',
             '#include "acl_subset.h"', "int main(void) {"]
    for struct in STRUCTS:
        lines.append(f'printf("sizeof {struct} %zu\\n", sizeof({struct}));')
        for field in _struct_fields(struct):
            lines.append(f'printf("offsetof {struct}.{field} %zu\\n", offsetof({struct}, {field}));')
    for name in _integer_constants():
        lines.append(f'printf("const {name} %lld\\n", (long long)({name}));')
    lines += ["return 0;", "}"]
    work = tmp_path_factory.mktemp("abi")
    source = work / "layout.c"
    source.write_text("\n".join(lines))
    exe = work / "layout"
    # the compiler is not under test: without the sanitizer runtime a CI stage preloads
    # (LeakSanitizer would fail it for the compiler's own leaks)
    compiler_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", f"-I{INCLUDE}", str(source), "-o", str(exe)], check=True,
                   env=compiler_env)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {key: int(value) for key, value in (line.rsplit(" ", 1) for line in out.splitlines())}


def _integer_constants() -> list[str]:
    names = []
    for fragment in _cdef.LLDD_FRAGMENTS + _cdef.ACL_FRAGMENTS:
        text = re.sub(r"/\*.*?\*/", "", (INCLUDE / fragment).read_text(), flags=re.S)
        for body in re.findall(r"enum\s*\w*\s*\{(.*?)\}", text, flags=re.S):
            names += re.findall(r"(\w+)\s*=", body)
    return names


def test_constants_are_found() -> None:
    names = _integer_constants()
    assert "LLM_PARAM_INVALID" in names and "ACL_ERROR_RT_DEVICE_MEM_ERROR" in names
    # lldd: 30 statuses + ABI version + 3 roles + 2 placements + 6 capabilities + 3 key kinds
    # + 2 cache kinds + 3 register-memory states; the mock's 5 transfer paths;
    # ACL: 8 memcpy kinds + 11 policies + 18 memory attributes + 25 general + 18 runtime codes.
    assert len(names) == 50 + 5 + 80


def test_struct_sizes_agree_between_cffi_and_c(c_layout: dict[str, int]) -> None:
    for struct in STRUCTS:
        assert ffi.sizeof(struct) == c_layout[f"sizeof {struct}"], struct


def test_struct_field_offsets_agree_between_cffi_and_c(c_layout: dict[str, int]) -> None:
    for struct in STRUCTS:
        for field in _struct_fields(struct):
            assert ffi.offsetof(struct, field) == c_layout[f"offsetof {struct}.{field}"], f"{struct}.{field}"


def test_constants_agree_between_cffi_and_c(c_layout: dict[str, int]) -> None:
    for name in _integer_constants():
        # C prints through long long: an unsigned 0xFFFFFFFF enumerator stays positive.
        assert const(name) == c_layout[f"const {name}"], name


def test_status_values_are_the_vendor_values() -> None:
    # Literal values from docs/reference/status-codes.md §2, as an independent check of the header.
    assert const("LLM_FAILED") == 0xFFFFFFFF
    assert const("LLM_PARAM_INVALID") == 0x5010B005
    assert const("LLM_OUT_OF_MEMORY") == 0x5010B01C


def test_abi_version_of_library_matches_headers() -> None:
    from llm_datadist_ffi import _capi
    assert _capi.lldd_abi_version() == const("LLDD_ABI_VERSION") == 1


# Declared functions that cannot fail with a status: version and capability queries,
# text getters, and the calls that release (the vendor's Finalize returns nothing).
NEVER_FAILING = ("lldd_abi_version", "lldd_capabilities", "lldd_backend_name", "lldd_last_error",
                 "lldd_destroy", "lldd_finalize", "aclGetRecentErrMsg", "aclrtGetSocName")


def fallible_functions() -> list[str]:
    declared = declared_functions("lldd/api.h") + declared_functions("lldd/ext.h") + declared_functions("acl/api.h")
    return [name for name in declared if name not in NEVER_FAILING]


def mock_fault_names() -> list[str]:
    """The names of the mock's fault table (k_fault_names in mock_libs/base/faults.c)."""
    text = (REPO / "mock_libs" / "base" / "faults.c").read_text()
    table = re.search(r"k_fault_names\[\] = \{(.*?)\};", text, flags=re.S)
    assert table is not None, "mock_libs/base/faults.c has no k_fault_names table"
    return re.findall(r'"(\w+)"', table.group(1))


def test_the_fault_table_names_exactly_the_functions_that_can_fail() -> None:
    names = mock_fault_names()
    assert len(names) == len(set(names)) == 15 + 18 + 22
    assert sorted(names) == sorted(fallible_functions())


@pytest.mark.mock_only(reason="fault injection is part of the mock's control interface")
def test_every_failing_function_can_be_given_an_injected_fault() -> None:
    try:
        for name in fallible_functions():
            mock_control.inject_fault(name, 0x5010B005, count=0)
    finally:
        mock_control.clear_faults()


@pytest.mark.mock_only(reason="fault injection is part of the mock's control interface")
@pytest.mark.parametrize("name", [n for n in fallible_functions() if n.startswith("lldd_")])
def test_an_injected_fault_is_what_the_function_returns_first(name: str) -> None:
    # Arguments are all NULL or zero: the fault is answered before any of them is read.
    # (tests/acl/test_acl.py makes every ACL function of the table fail the same way.)
    function = getattr(lldd_lib, name)
    args = [ffi.NULL if arg.kind == "pointer" else 0 for arg in ffi.typeof(function).args]
    with mock_control.fault(name, 0x5010B01A, count=1):
        assert function(*args) == 0x5010B01A
        assert _capi.last_error() == f"{name}: injected fault, status 0x5010B01A"


@pytest.mark.mock_only(reason="fault injection is part of the mock's control interface")
@pytest.mark.parametrize("name", NEVER_FAILING)
def test_a_function_that_cannot_fail_takes_no_injected_fault(name: str) -> None:
    with pytest.raises(llm_datadist_ffi.LLMException, match="is not a function that can fail"):
        mock_control.inject_fault(name, 0x5010B005)


@pytest.mark.mock_only(reason="fault injection is part of the mock's control interface")
def test_injecting_a_fault_into_an_unknown_function_is_rejected() -> None:
    with pytest.raises(llm_datadist_ffi.LLMException) as info:
        mock_control.inject_fault("lldd_no_such_function", 0x5010B005)
    assert info.value.status_code == llm_datadist_ffi.LLMStatusCode.LLM_PARAM_INVALID
    assert "lldd_no_such_function" in str(info.value)


def _build_mock_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_mock", REPO / "mock_libs" / "build_mock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mock_sources_with(tmp_path: Path, extra_file: str) -> Path:
    src = tmp_path / "src"
    shutil.copytree(REPO / "mock_libs", src, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    (src / "core" / "zz_extra.c").write_text(extra_file)
    return src


def test_every_function_of_the_mock_is_reached_from_an_exported_one(tmp_path: Path) -> None:
    assert _build_mock_module().unused_functions(tmp_path) == []


def test_the_unused_function_check_names_a_function_that_nothing_calls(tmp_path: Path) -> None:
    src = _mock_sources_with(tmp_path, "int zz_never_called(int x);\nint zz_never_called(int x) { return x + 1; }\n")
    assert _build_mock_module().unused_functions(tmp_path / "out", src) == ["zz_never_called"]


def test_a_mock_function_without_a_prototype_does_not_compile(tmp_path: Path) -> None:
    # -Wmissing-prototypes: a file-local function must be static (then -Wunused-function
    # reports it once nothing calls it).
    src = _mock_sources_with(tmp_path, "int zz_no_prototype(int x) { return x + 1; }\n")
    with pytest.raises(subprocess.CalledProcessError) as info:
        _build_mock_module().unused_functions(tmp_path / "out", src)
    # The compiler quotes the name with the locale's quotation marks.
    assert re.search(r"error: no previous prototype for \W?zz_no_prototype\W", info.value.stderr)


def _null_argument_calls(e: object) -> list[tuple[str, tuple[object, ...], str]]:
    """(function, arguments, the first NULL argument's name in its message) per case."""
    NULL = ffi.NULL
    shape = ffi.new("int64_t[]", [1, 4])
    desc = ffi.new("lldd_cache_desc *", {"placement": 1, "num_tensors": 1, "data_type": 4, "shape": shape,
                                         "shape_len": 2})
    shapeless = ffi.new("lldd_cache_desc *", {"placement": 1, "num_tensors": 1, "data_type": 4, "shape": NULL,
                                              "shape_len": 2})
    key = ffi.new("lldd_key *", {"kind": 1, "req_id": 1, "prefix_id": 2**64 - 1, "model_id": 0})
    addrs, cid, out = ffi.new("uint64_t[]", 1), ffi.new("int64_t *"), ffi.new("uint64_t *")
    no_pull_lists = (NULL, 0, NULL, 0, NULL, 0)
    return [
        ("lldd_register_kv_cache", (NULL, desc, addrs, 1, cid), "engine"),
        ("lldd_register_kv_cache", (e, desc, NULL, 1, cid), "addrs (num_addrs > 0)"),
        ("lldd_register_kv_cache", (e, shapeless, addrs, 1, cid), "cache_desc.shape (shape_len > 0)"),
        ("lldd_ext_register_cache", (e, NULL, addrs, 1, 1, 1, key, 1, cid), "cache_desc"),
        ("lldd_ext_register_cache", (e, desc, addrs, 1, 1, 1, NULL, 1, cid), "keys (num_keys > 0)"),
        ("lldd_ext_register_cache", (e, shapeless, addrs, 1, 1, 1, key, 1, cid), "cache_desc.shape (shape_len > 0)"),
        ("lldd_ext_allocate_cache", (e, desc, 1, key, 1, NULL, addrs, 1), "cache_id"),
        ("lldd_ext_allocate_cache", (e, desc, 1, NULL, 1, cid, addrs, 1), "keys (num_keys > 0)"),
        ("lldd_ext_remove_cache_key", (e, NULL), "key"),
        ("lldd_ext_link", (e, NULL, NULL, NULL, 0, b"{}", out), "comm_name"),
        ("lldd_ext_link", (e, b"c", NULL, NULL, 2, b"{}", out), "cluster_ids and ranks"),
        ("lldd_ext_link", (e, b"c", NULL, NULL, 0, NULL, out), "rank_table"),
        ("lldd_ext_link", (e, b"c", NULL, NULL, 0, b"{}", NULL), "comm_id"),
        ("lldd_ext_query_register_mem_status", (e, 1, NULL), "status"),
        ("lldd_ext_remap_registered_memory", (e, NULL, NULL, 1), "addrs and sizes (num > 0)"),
        ("lldd_ext_pull", (e, NULL, 1, 0, -1, *no_pull_lists, NULL, 0, -1, -1, 1), "src"),
        ("lldd_ext_pull", (e, key, 1, 0, -1, NULL, 2, *no_pull_lists[2:], NULL, 0, -1, -1, 1),
         "src_blocks (num_src_blocks > 0)"),
        ("lldd_ext_pull", (e, key, 1, 0, -1, *no_pull_lists, NULL, 2, -1, -1, 1), "dst_tensors (num_dst_tensors > 0)"),
    ]


@pytest.mark.mock_only(reason="the wording of the mock's NULL-argument messages")
def test_the_first_null_argument_is_named_in_the_refusal() -> None:
    engine = ffi.new("lldd_engine **")
    assert lldd_lib.lldd_create(1, 1, engine) == 0
    try:
        for name, args, missing in _null_argument_calls(engine[0]):
            assert (name, getattr(lldd_lib, name)(*args)) == (name, llm_datadist_ffi.LLMStatusCode.LLM_PARAM_INVALID)
            assert _capi.last_error() == f"{name}: {missing} must not be NULL"
        # with every argument given, the entry goes on to the engine, which is not initialized
        assert lldd_lib.lldd_ext_query_register_mem_status(engine[0], 1, ffi.new("uint32_t *")) == \
            llm_datadist_ffi.LLMStatusCode.LLM_FAILED
    finally:
        lldd_lib.lldd_destroy(engine[0])


def _without_preload() -> dict[str, str]:
    # the suite may run with a sanitizer runtime preloaded; the tools must not get it
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


def _symbols(obj: Path, *flags: str) -> set[str]:
    listing = subprocess.run(["nm", "--format=just-symbols", *flags, str(obj)], check=True, capture_output=True,
                             text=True, env=_without_preload()).stdout
    return set(listing.split())


# docs/design.md, "The mock's modules": which folder's files may call which folder's. Within
# core/ and wire/ (which interleave: the links use the core's tables, the transfers and the
# life cycle use the links) the order is the file graph's, which must have no circle.
FOLDER_MAY_CALL = {
    "base": {"base"},
    "acl": {"base", "acl"},
    "core": {"base", "acl", "core", "wire"},
    "wire": {"base", "acl", "core", "wire"},
    "ext": {"base", "acl", "core", "wire", "ext"},
    "api": {"base", "acl", "core", "wire", "ext"},
}


def _compile_object(source: Path, obj: Path) -> tuple[set[str], set[str]]:
    """The external symbols a C file of the mock defines and those it needs."""
    subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-D_GNU_SOURCE", "-fPIC", "-c", f"-I{REPO / 'include'}",
                    f"-I{REPO / 'mock_libs'}", str(source), "-o", str(obj)], check=True, env=_without_preload())
    return _symbols(obj, "--defined-only", "--extern-only"), _symbols(obj, "--undefined-only")


@pytest.fixture(scope="module")
def mock_symbols(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[set[str], set[str]]]:
    """Per C file of the mock ("core/engine.c"): (symbols it defines, symbols it needs)."""
    out = tmp_path_factory.mktemp("objects")
    root = REPO / "mock_libs"
    return {source.relative_to(root).as_posix(): _compile_object(source, out / (source.stem + ".o"))
            for source in sorted(root.rglob("*.c"))}


def _file_graph(symbols: dict[str, tuple[set[str], set[str]]]) -> dict[str, set[str]]:
    """file -> the files that define a symbol it needs (a call or a use of a variable)."""
    return {name: {other for other, (defines, _) in symbols.items() if other != name and defines & needs}
            for name, (_, needs) in symbols.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of two or more files, each sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = []
            while (member := stack.pop()) != node:
                group.append(member)
            if group:
                found.append(sorted([*group, node]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _folder_breaches(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """file -> the files it calls that its folder may not call (FOLDER_MAY_CALL)."""
    def folder(name: str) -> str:
        return name.split("/")[0] if "/" in name else ""

    breaches = {name: sorted(callee for callee in callees if folder(callee) not in FOLDER_MAY_CALL.get(folder(name), ()))
                for name, callees in graph.items()}
    return {name: callees for name, callees in breaches.items() if callees}


def test_the_modules_of_the_mock_call_each_other_without_a_circle(
        mock_symbols: dict[str, tuple[set[str], set[str]]]) -> None:
    graph = _file_graph(mock_symbols)
    assert _circles(graph) == []
    # not vacuous: the graph has the edges of the layering (life cycle above the links and the
    # caches, both handshakes above the link table and the server thread, services below all)
    assert {"core/engine_cache.c", "wire/engine_link.c", "core/engine_services.c"} <= graph["core/engine.c"]
    assert {"wire/engine_link.c", "wire/engine_serve.c"} <= graph["wire/engine_link_listen.c"]
    assert "core/engine_services.c" in graph["wire/engine_link.c"]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_each_folder_of_the_mock_calls_only_the_folders_it_may(
        mock_symbols: dict[str, tuple[set[str], set[str]]]) -> None:
    # The core calls nothing of the extension layer: it reaches it only through hooks the
    # extension layer sets. Nothing calls the entry points.
    assert {name.split("/")[0] for name in mock_symbols} == set(FOLDER_MAY_CALL)
    graph = _file_graph(mock_symbols)
    assert _folder_breaches(graph) == {}
    # not vacuous: the extension layer does call the core
    needed = mock_symbols["ext/engine_ext_xfer.c"][1] | mock_symbols["ext/engine_ext_cache.c"][1]
    assert {"holder_resolve_locked", "key_bind_locked", "link_acquire_ex"} <= needed


def test_the_layering_checks_name_a_planted_circle_and_a_planted_call_up(
        mock_symbols: dict[str, tuple[set[str], set[str]]], tmp_path: Path) -> None:
    # the services module calls a new core file that calls the services back; another new
    # core file calls the extension layer
    services = REPO / "mock_libs" / "core" / "engine_services.c"
    planted_services = tmp_path / "engine_services.c"
    planted_services.write_text(services.read_text() + "\nint zz_calls_back(void);\n"
                                "int zz_planted(void);\nint zz_calls_back(void) { return zz_planted(); }\n")
    circle = tmp_path / "zz_planted.c"
    circle.write_text("#include \"core/engine.h\"\nint zz_planted(void);\n"
                      "int zz_planted(void) { return (int)engine_live_engines(); }\n")
    call_up = tmp_path / "zz_call_up.c"
    call_up.write_text("#include \"ext/ext.h\"\nint zz_call_up(void);\n"
                       "int zz_call_up(void) { return ext_role_name(0)[0]; }\n")
    symbols = dict(mock_symbols)
    symbols["core/engine_services.c"] = _compile_object(planted_services, tmp_path / "engine_services.o")
    symbols["core/zz_planted.c"] = _compile_object(circle, tmp_path / "zz_planted.o")
    symbols["core/zz_call_up.c"] = _compile_object(call_up, tmp_path / "zz_call_up.o")
    graph = _file_graph(symbols)
    assert _circles(graph) == [["core/engine_services.c", "core/zz_planted.c"]]
    assert _folder_breaches(graph) == {"core/zz_call_up.c": ["ext/engine_ext.c"]}


def _function_lengths(source: str) -> dict[str, int]:
    """Each function's body in lines, from the line of its opening brace to that of its
    closing one, by a scan of braces outside comments, literals and preprocessor lines."""
    def keep_lines(match: re.Match[str]) -> str:
        return "\n" * match.group(0).count("\n")

    text = re.sub(r"/\*.*?\*/", keep_lines, source, flags=re.S)
    text = re.sub(r"//[^\n]*|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", keep_lines, text, flags=re.M)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"' + r"|'(?:\\.|[^'\\\n])*'", '""', text)
    lengths: dict[str, int] = {}
    depth, opened, head_from = 0, 0, 0
    for i, char in enumerate(text):
        if char == "{":
            if depth == 0:
                opened = i
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                head = text[head_from:opened]
                name = re.search(r"(\w+)\s*\(", head)
                if head.rstrip().endswith(")") and name is not None:  # a function, not an initializer
                    lengths[name.group(1)] = text.count("\n", opened, i) + 1
                head_from = i + 1
        elif char == ";" and depth == 0:
            head_from = i + 1
    return lengths


def test_no_function_of_the_mock_is_longer_than_a_hundred_lines() -> None:
    # STYLE: a long check pipeline or handshake reads as one function per step.
    lengths = {f"{source.name}:{name}": lines for source in sorted((REPO / "mock_libs").rglob("*.c"))
               for name, lines in _function_lengths(source.read_text()).items()}
    assert {name: lines for name, lines in lengths.items() if lines > 100} == {}
    # not vacuous: the scan finds the functions, with their lengths
    assert lengths["transport.c:tp_close"] == 6 and len(lengths) > 300
    sample = "/* { */\n#define X {\nstatic const int t[] = {\n1, 2 };\nint f(int x)\n{\n    return '{' + x;\n}\n"
    assert _function_lengths(sample) == {"f": 3}
