"""Backend choice and library loading: the raw ``ffi`` and ``lib`` tier.

The backend is chosen once, at import, by ``LLM_DATADIST_FFI_BACKEND``:

``mock``
    The C mock in ``_lib/libllm_datadist_mock.so`` (or the file named by
    ``LLM_DATADIST_FFI_MOCK_LIB``, e.g. a sanitizer build). It exports both the
    LLM-DataDist C ABI and the ACL subset.
``ascend``
    The C-ABI shim ``_lib/libllm_datadist_ffi_shim.so`` compiled on an Ascend host
    against the toolkit, plus the ACL runtime ``libacl_rt.so`` (else the legacy
    ``libascendcl.so``), found through ``LD_LIBRARY_PATH`` as ``set_env.sh`` sets it.
``auto`` (default)
    ``ascend`` when the toolkit is present (``ASCEND_HOME_PATH`` or
    ``ASCEND_TOOLKIT_HOME``) and the shim was built, else ``mock``.

Anything else is an ImportError listing the valid values.

**Running from the source tree.** ``python -m llm_datadist_ffi``, ``python -m pytest``,
a script or a REPL started in the repository root import the package from the source
tree (the current directory comes first on ``sys.path``), not the installed copy. So
when this package sits in a source checkout (``mock_libs/build_mock.py`` beside it) and
the mock library in ``llm_datadist_ffi/_lib/`` is missing or older than any of its C
sources or headers, the loader compiles it there first, once, under a file lock (one
compiler run however many processes start together), writing to a temporary name and
renaming, so that no process ever opens a half-written library. An installed package
never compiles anything at import. A failure to load the
chosen backend is an ImportError that says what to do; there is never a silent
fall-back from ``ascend`` to ``mock`` (docs/design.md, "Backend selection"). After loading, the library's
ABI version must equal the headers' ``LLDD_ABI_VERSION``.

Only ``llm_datadist_ffi._core._capi`` and ``llm_datadist_ffi.acl`` use ``lldd_lib`` and
``acl_lib`` directly (docs/design.md).
"""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi

from ._cdef import cdef_text, include_dir

BACKEND_ENV = "LLM_DATADIST_FFI_BACKEND"
MOCK_LIB_ENV = "LLM_DATADIST_FFI_MOCK_LIB"
SHIM_LIB_ENV = "LLM_DATADIST_FFI_SHIM_LIB"
VALID_BACKENDS = ("mock", "ascend", "auto")

MOCK_LIB_NAME = "libllm_datadist_mock.so"
SHIM_LIB_NAME = "libllm_datadist_ffi_shim.so"
ACL_LIB_NAMES = ("libacl_rt.so", "libascendcl.so")

_PACKAGE_DIR = Path(__file__).resolve().parent.parent   # llm_datadist_ffi/, this module is in _core/
_LIB_DIR = _PACKAGE_DIR / "_lib"


@dataclass(frozen=True)
class LoadedBackend:
    """What was loaded, for ``python -m llm_datadist_ffi info``."""

    name: str
    lldd_path: str
    acl_path: str


def _requested_backend() -> str:
    value = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if value not in VALID_BACKENDS:
        raise ImportError(
            f"{BACKEND_ENV}={os.environ.get(BACKEND_ENV)!r} is not a backend; "
            f"valid values are {', '.join(VALID_BACKENDS)}"
        )
    return value


def _toolkit_root() -> str | None:
    return os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME") or None


def _shim_path() -> Path:
    override = os.environ.get(SHIM_LIB_ENV)
    return Path(override) if override else _LIB_DIR / SHIM_LIB_NAME


def _mock_path() -> Path:
    override = os.environ.get(MOCK_LIB_ENV)
    return Path(override) if override else _LIB_DIR / MOCK_LIB_NAME


def source_checkout() -> Path | None:
    """The repository root when this package runs from its source tree, else None."""
    root = _PACKAGE_DIR.parent
    if (root / "mock_libs" / "build_mock.py").is_file() and (root / "include" / "lldd").is_dir():
        return root
    return None


def _mock_inputs(root: Path) -> list[Path]:
    return [*(root / "mock_libs").rglob("*.[ch]"), *(root / "include").rglob("*.h")]


def _is_stale(lib: Path, root: Path) -> bool:
    if not lib.is_file():
        return True
    built = lib.stat().st_mtime
    return any(source.stat().st_mtime > built for source in _mock_inputs(root))


def _build_in_source_tree(root: Path) -> None:
    """Compile the mock into ``_lib/`` of the source tree unless it is up to date.

    Raises:
        ImportError: the compiler failed (its output is in the message) or ``_lib/``
            cannot be written.
    """
    target = _LIB_DIR / MOCK_LIB_NAME
    if not _is_stale(target, root):
        return
    try:
        _LIB_DIR.mkdir(exist_ok=True)
        with open(_LIB_DIR / ".build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)    # another process may be building it right now
            if not _is_stale(target, root):
                return
            print(f"llm_datadist_ffi: compiling the mock backend from {root / 'mock_libs'} into {_LIB_DIR} "
                  "(a source checkout; done once per change of the C sources)", file=sys.stderr, flush=True)
            with tempfile.TemporaryDirectory(dir=_LIB_DIR, prefix=".build-") as scratch:
                result = subprocess.run(
                    [sys.executable, str(root / "mock_libs" / "build_mock.py"), scratch],
                    capture_output=True, text=True, check=False)
                if result.returncode != 0:
                    output = (result.stderr or result.stdout).strip()[-2000:]
                    raise ImportError(
                        f"llm_datadist_ffi: compiling the mock backend in the source checkout {root} failed "
                        f"(a C compiler is needed, as for `pip install .`):\n{output}")
                os.replace(Path(scratch) / MOCK_LIB_NAME, target)
    except OSError as exc:
        raise ImportError(f"llm_datadist_ffi: cannot build the mock backend into {_LIB_DIR}: {exc}") from exc


def _choose(requested: str) -> str:
    if requested != "auto":
        return requested
    return "ascend" if _toolkit_root() and _shim_path().is_file() else "mock"


def _dlopen(ffi: cffi.FFI, path: str) -> Any:
    return ffi.dlopen(path)


def _keep_loaded(ffi: cffi.FFI, path: str) -> None:
    """Marks an accepted library RTLD_NODELETE: the backends start threads, which must
    never outlive their code, and LeakSanitizer's check at exit needs the library's
    globals and symbols (docs/security.md §1.4). A rejected library is not marked, so
    that it is unloaded as before."""
    ffi.dlopen(path, ffi.RTLD_NOW | ffi.RTLD_NOLOAD | ffi.RTLD_NODELETE)


def _load_mock(ffi: cffi.FFI) -> tuple[Any, Any, LoadedBackend]:
    path = _mock_path()
    root = source_checkout()
    if root is not None and not os.environ.get(MOCK_LIB_ENV):
        _build_in_source_tree(root)
    if not path.is_file():
        raise ImportError(
            f"llm_datadist_ffi: the mock backend library {path} is missing. Install the package "
            "with `pip install .` (it compiles mock_libs/), or build it with "
            "`python mock_libs/build_mock.py llm_datadist_ffi/_lib` in a source checkout."
        )
    try:
        lib = _dlopen(ffi, str(path))
    except OSError as exc:
        raise ImportError(f"llm_datadist_ffi: cannot load the mock backend {path}: {exc}") from exc
    return lib, lib, LoadedBackend("mock", str(path), str(path))


def _load_ascend(ffi: cffi.FFI) -> tuple[Any, Any, LoadedBackend]:
    root = _toolkit_root()
    shim = _shim_path()
    hint = (
        "source the toolkit's set_env.sh (e.g. `source /usr/local/Ascend/ascend-toolkit/set_env.sh`) "
        "and reinstall with `pip install .` so that the shim is compiled against it"
    )
    if root is None:
        raise ImportError(
            f"llm_datadist_ffi: {BACKEND_ENV}=ascend but no Ascend toolkit is set up: neither "
            f"ASCEND_HOME_PATH nor ASCEND_TOOLKIT_HOME is set; {hint}"
        )
    if not shim.is_file():
        raise ImportError(
            f"llm_datadist_ffi: the ascend shim {shim} was not built (the toolkit at {root} was not "
            f"present when the package was installed); {hint}"
        )
    acl = None
    acl_name = ""
    errors = []
    for name in ACL_LIB_NAMES:
        try:
            acl = _dlopen(ffi, name)
            acl_name = name
            break
        except OSError as exc:
            errors.append(f"{name}: {exc}")
    if acl is None:
        raise ImportError(
            "llm_datadist_ffi: cannot load the ACL runtime (" + "; ".join(errors) + f"); {hint}"
        )
    try:
        lldd = _dlopen(ffi, str(shim))
    except OSError as exc:
        raise ImportError(f"llm_datadist_ffi: cannot load the ascend shim {shim}: {exc}; {hint}") from exc
    return lldd, acl, LoadedBackend("ascend", str(shim), acl_name)


def _check_strict() -> None:
    """``LLM_DATADIST_FFI_STRICT`` is read per call; a value that means neither on nor
    off is refused here already, where the backend variable is, rather than at the
    first lint."""
    from ..lint import strict

    try:
        strict()
    except ValueError as exc:
        raise ImportError(f"llm_datadist_ffi: {exc}") from None


def _load() -> tuple[cffi.FFI, Any, Any, LoadedBackend]:
    ffi = cffi.FFI()
    ffi.cdef(cdef_text())
    _check_strict()
    chosen = _choose(_requested_backend())
    loader = _load_mock if chosen == "mock" else _load_ascend
    lldd, acl, loaded = loader(ffi)
    expected = int(lldd.LLDD_ABI_VERSION)
    found = lldd.lldd_abi_version()
    if found != expected:
        raise ImportError(
            f"llm_datadist_ffi: {loaded.lldd_path} implements C ABI version {found}, but this package "
            f"was built for version {expected}; reinstall the package (`pip install .`) so that the "
            "library and the Python code come from the same source"
        )
    _keep_loaded(ffi, loaded.lldd_path)
    for library in {id(lldd): lldd, id(acl): acl}.values():   # the mock is both
        _resolve_every_name(library)
    return ffi, lldd, acl, loaded


def _resolve_every_name(library: Any) -> None:
    """Looks up every declared name of ``library`` once, now (about 2 ms).

    cffi resolves a name of a ``dlopen`` library on its first use, under the FFI's
    lock, which is not reentrant. The garbage collector runs finalizers wherever this
    thread allocates, also while it holds that lock (cffi parsing a type for
    ``ffi.new``), and a finalizer that frees something (an engine, a cache, ACL memory)
    calls the library: a first lookup there would wait for itself forever
    (docs/design.md, "Finalizers"). Once every name is in the library object's
    ``__dict__``, no later use takes the lock. A declared function the library does
    not export (an older ACL runtime) stays unresolved; its callers test for it.
    """
    for name in dir(library):
        try:
            getattr(library, name)
        except AttributeError:   # cffi: declared but not exported by this library
            pass


ffi, lldd_lib, acl_lib, loaded = _load()

#: ``"mock"`` or ``"ascend"``: the live backend.
backend: str = loaded.name


def const(name: str) -> int:
    """The value of an integer constant (enumerator) of the header fragments."""
    return int(getattr(lldd_lib, name))


__all__ = ["ffi", "lldd_lib", "acl_lib", "loaded", "backend", "include_dir", "const"]
