"""Helpers of the C++ SDK's tests (tests/cpp, docs/cpp.md): the SDK under test and the
flags programs are built with, the compile step, the environment programs run in.

- ``find_sdk()``: by default the SDK of the package under test, flags from ``python -m llm_datadist_ffi
  sdk --cflags --libs`` (so the command is what every test builds with); with
  ``LLDD_SDK_PREFIX`` (``.ci/run``'s sanitizer stage) another build of it, flags from its
  pkg-config file, plus ``LLDD_SDK_CXXFLAGS`` (e.g. ``-fsanitize=address,undefined``).
- ``compile_program``: with the vendor samples' own options by default
  (``-D_GLIBCXX_USE_CXX11_ABI=0 -O2 -Wall -Wextra -Werror`` and the rest of their CMakeLists).
- ``program_env()``: the environment programs run in: without ``LD_LIBRARY_PATH`` (their
  rpath must be enough), ``LD_PRELOAD`` or ``LLM_DATADIST_FFI_MOCK_LIB``, which other
  stages of .ci/run set for the Python processes.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[2]
CPP_TESTS = ROOT / "tests" / "cpp"
PROGRAMS = CPP_TESTS / "programs"
NAMES = ("kv_server", "decoder_pull", "prompt_push", "switch_roles", "sdk_behaviour", "conformance")
# The vendor's examples/cpp CMakeLists: these compile options, -D_GLIBCXX_USE_CXX11_ABI=0.
VENDOR_SAMPLE_FLAGS = ["-D_GLIBCXX_USE_CXX11_ABI=0", "-ftrapv", "-O2", "-fno-common", "-Wfloat-equal", "-Wall",
                       "-Werror", "-Wextra"]
CXX = shlex.split(os.environ.get("CXX", "") or "g++")


def program_env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "LLM_DATADIST_FFI_MOCK_LIB")}
    env.update(extra)
    return env


def python_env(**extra: str) -> Dict[str, str]:
    """The environment of a Python process of a pair: this one's (the backend and the
    sanitizer settings of the stage), importing the package under test."""
    import llm_datadist_ffi

    package_root = str(Path(llm_datadist_ffi.__file__).resolve().parents[1])
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env


@dataclass
class Sdk:
    prefix: Path
    cflags: List[str]
    libs: List[str]


def find_sdk() -> Sdk:
    override = os.environ.get("LLDD_SDK_PREFIX")
    extra = shlex.split(os.environ.get("LLDD_SDK_CXXFLAGS", ""))
    if override:
        prefix = Path(override)
        env = program_env(PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
        flags = [subprocess.run(["pkg-config", what, "llm_datadist_mock"], env=env, check=True,
                                capture_output=True, text=True).stdout.split() for what in ("--cflags", "--libs")]
        return Sdk(prefix, [*extra, *flags[0]], flags[1])
    cli = [sys.executable, "-m", "llm_datadist_ffi", "sdk"]      # the package this test process imports
    run = [subprocess.run([*cli, what], env=python_env(), check=True, capture_output=True, text=True).stdout.split()
           for what in ("--prefix", "--cflags", "--libs")]
    return Sdk(Path(run[0][0]), [*extra, *run[1]], run[2])


def compile_program(sdk: Sdk, source: Path, out: Path, flags: List[str] = VENDOR_SAMPLE_FLAGS) -> Path:
    cmd = [*CXX, *flags, *sdk.cflags, str(source), "-o", str(out), *sdk.libs]
    result = subprocess.run(cmd, env=program_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert result.returncode == 0, f"{shlex.join(cmd)}\n{result.stdout}"
    return out
