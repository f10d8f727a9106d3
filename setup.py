"""Build hooks: compile the native parts while the package is built.

``pip install .`` runs ``build_py``, which here also
  1. copies ``include/`` into the package as ``_include/`` (the cdef source the
     loader reads at run time: the same text the C compilers read), and the user
     documents of ``docs/`` as ``_docs/`` (``llm_datadist_ffi/_tools/_userdocs.py`` names them;
     ``python -m llm_datadist_ffi docs`` prints them);
  2. compiles the mock backend ``mock_libs/*/*.c`` into ``_lib/libllm_datadist_mock.so``,
     and the C++ SDK over it (``mock_libs/cpp/build_sdk.py``, docs/cpp.md) into ``_lib/sdk``;
  3. on a host with the Ascend toolkit (``ASCEND_HOME_PATH``/``ASCEND_TOOLKIT_HOME``,
     or ``LLM_DATADIST_FFI_ASCEND_HOME``), compiles the C-ABI shim against it into
     ``_lib/libllm_datadist_ffi_shim.so``; elsewhere this step is skipped silently.
``pip install -e .`` (editable) compiles the libraries into ``llm_datadist_ffi/_lib/`` of
the source tree instead, where the package it installs looks for them.

The wheel carries shared objects but no CPython extension module: the libraries are
opened with cffi's ``dlopen`` and never import Python's C API. So it is tagged
``py3-none-<platform>``: specific to the platform (the objects are machine code), valid
for every Python 3 on it (one wheel per platform instead of one per Python version).
"""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:  # setuptools >= 70.1 carries bdist_wheel; before that the wheel package does
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover - depends on the build environment
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent


def _load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


class BuildPyWithNative(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            # `pip install -e .` imports the package from this source tree, which reads
            # include/ beside it; the libraries go where that package looks for them.
            lib_dir = ROOT / "llm_datadist_ffi" / "_lib"
        else:
            package_dir = Path(self.build_lib) / "llm_datadist_ffi"
            shutil.copytree(ROOT / "include", package_dir / "_include", dirs_exist_ok=True)
            # the user documents, for `python -m llm_datadist_ffi docs` (an editable
            # install reads docs/ of the source tree)
            _load_script(ROOT / "llm_datadist_ffi" / "_tools" / "_userdocs.py").ship(ROOT / "docs", package_dir)
            lib_dir = package_dir / "_lib"
        build_mock = _load_script(ROOT / "mock_libs" / "build_mock.py")
        mock = build_mock.build(lib_dir)
        build_sdk = _load_script(ROOT / "mock_libs" / "cpp" / "build_sdk.py")
        build_sdk.build(lib_dir / "sdk", mock)
        shim_script = ROOT / "llm_datadist_ffi" / "_shim" / "build_shim.py"
        if shim_script.is_file():
            build_shim = _load_script(shim_script)
            toolkit = build_shim.find_toolkit_root()
            if toolkit is not None:
                # -Werror stays for CI; a real toolkit's own headers must not fail an install.
                build_shim.build(toolkit, lib_dir, werror=False)


class BinaryDistribution(Distribution):
    """Installs into platlib: the package holds machine code."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    """``py3-none-<platform>``: see the module docstring."""

    def get_tag(self) -> tuple[str, str, str]:
        _python, _abi, platform = super().get_tag()
        return "py3", "none", platform


setup(cmdclass={"build_py": BuildPyWithNative, "bdist_wheel": PlatformWheel}, distclass=BinaryDistribution)
