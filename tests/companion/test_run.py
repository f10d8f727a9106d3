"""``python -m llm_datadist_ffi run`` and the plugin's ``--lldd-backend``: the companion
where the vendor's package is importable (here the recording stand-in), the compat
alias on the mock elsewhere."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Optional

from ports import free_port

ROOT = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parent / "standin"

SCRIPT = """
import sys, warnings
import llm_datadist
print("argv", sys.argv[1:])
print("module", "standin" in (llm_datadist.__file__ or ""))
e = llm_datadist.LLMDataDist(llm_datadist.LLMRole.DECODER, 2)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    e.init({"llm.EnableCacheManager": "1", "llm.SyncKvCacheWaitTime": "0", "llm.listenIpInfo": "127.0.0.1:PORT"})
print("rules", sorted(getattr(w.message, "rule", "") for w in caught))
e.finalize()
sys.exit(3)
"""


def _run(args: list[str], standin: bool, cwd: Path, env: Optional[Dict[str, str]] = None
         ) -> subprocess.CompletedProcess[str]:
    path = [str(ROOT)] + ([str(STANDIN)] if standin else [])
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(path), **(env or {})}
    full.pop("LLM_DATADIST_FFI_STRICT", None)
    return subprocess.run([sys.executable, "-m", "llm_datadist_ffi", *args], capture_output=True, text=True,
                          env=full, cwd=cwd, timeout=300, check=False)


def test_run_chooses_the_companion_where_the_vendor_package_is_importable(tmp_path: Path) -> None:
    script = tmp_path / "serve.py"
    script.write_text(SCRIPT.replace("PORT", str(free_port())))
    done = _run(["run", str(script), "--port", "7"], standin=True, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == ["argv ['--port', '7']", "module True", "rules ['PR-26']"]
    assert "running" in done.stderr and "the companion over the vendor's llm_datadist" in done.stderr


def test_run_takes_the_mock_elsewhere_and_quiet_says_nothing(tmp_path: Path) -> None:
    script = tmp_path / "serve.py"
    script.write_text(SCRIPT.replace("PORT", str(free_port())))
    done = _run(["run", "--quiet", str(script)], standin=False, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == ["argv []", "module False", "rules ['PR-26']"]
    assert done.stderr == ""


def test_the_plugin_option_gives_the_companion_or_the_alias(tmp_path: Path) -> None:
    (tmp_path / "test_connector.py").write_text(textwrap.dedent("""
        import pytest

        def test_a_lint_is_an_error(llm_datadist_alias):
            e = llm_datadist_alias.LLMDataDist(llm_datadist_alias.LLMRole.DECODER, 2)
            print("BACKEND", "standin" in llm_datadist_alias.__file__)
            with pytest.raises(Warning, match="PR-26"):
                e.init({"llm.EnableCacheManager": "1", "llm.SyncKvCacheWaitTime": "0",
                        "llm.listenIpInfo": "127.0.0.1:PORT"})
    """))
    source = (tmp_path / "test_connector.py").read_text()
    for backend, standin, expected in (("companion", True, "BACKEND True"), ("auto", True, "BACKEND True"),
                                       ("mock", True, "BACKEND False"), ("auto", False, "BACKEND False")):
        (tmp_path / "test_connector.py").write_text(source.replace("PORT", str(free_port())))
        path = [str(ROOT)] + ([str(STANDIN)] if standin else [])
        # The plugin is named with -p and entry points are not loaded, so it is registered
        # once whether or not an installed package also declares it (pytest11).
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                               "-p", "llm_datadist_ffi.testing.pytest_plugin", f"--lldd-backend={backend}",
                               "test_connector.py"], capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=300, check=False)
        assert done.returncode == 0, (backend, done.stdout[-2000:])
        assert expected in done.stdout, backend
