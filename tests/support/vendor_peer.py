"""A peer process for the vendor-API tests: the other engine of a link.

The vendor's API allows one initialised ``LLMDataDist`` per process, so every
transfer test needs a second process. This program runs there. It reads one JSON
command per line on stdin, ``{"code": "<statements>", "value": "<expression>"}``,
executes the statements in one namespace that lives as long as the process, and
answers one JSON line: ``{"ok": true, "value": <the expression's value>}`` or
``{"ok": false, "type": "<exception class>", "status": <status_code or null>,
"message": "<str(exc)>"}``.

The namespace starts with ``llm_datadist`` (the package's vendor module, as client
code imports it after ``compat.install()``), ``np`` and ``fill`` (``vendor_support``).
It is started with its working directory outside the source tree, so that the
installed package is the one imported.
"""
from __future__ import annotations

import json
import re
import sys
import traceback
import warnings
from typing import Any, Dict

import numpy as np

import llm_datadist_ffi.compat  # noqa: E402

llm_datadist_ffi.compat.install()

import llm_datadist  # noqa: E402
from llm_datadist_ffi import LintWarning  # noqa: E402

LINT_ID = re.compile(r"\((PR-\d+|OPT-\d+)[;)]")

import vendor_support  # noqa: E402


def main() -> int:
    namespace: Dict[str, Any] = {"llm_datadist": llm_datadist, "np": np, "fill": vendor_support.fill,
                                 "support": vendor_support}
    exec("from llm_datadist import *", namespace)
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always", LintWarning)
            try:
                exec(command.get("code") or "", namespace)
                expression = command.get("value")
                value = eval(expression, namespace) if expression else None
                answer: Dict[str, Any] = {"ok": True, "value": value}
            except Exception as exc:  # noqa: BLE001 - reported to the test, which asserts on it
                status = getattr(exc, "status_code", None)
                answer = {"ok": False, "type": type(exc).__name__, "status": None if status is None else int(status),
                          "message": str(exc), "traceback": traceback.format_exc()}
        # the rule ids of the lint warnings the command emitted (docs/semantics.md §0)
        answer["lints"] = sorted({m.group(1) for r in records if issubclass(r.category, LintWarning)
                                  for m in [LINT_ID.search(str(r.message))] if m is not None})
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
