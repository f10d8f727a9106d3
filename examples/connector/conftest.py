"""The example's tests import ``kv_connector`` from this directory, which the pytest
configuration's ``pythonpath`` puts on ``sys.path``; the topology processes inherit it."""
from pathlib import Path

import pytest

import llm_datadist_ffi


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The example's engine processes are mock engines (the topology fixture starts the
    mock backend, whose vendor-compatible API the connector uses); with another backend
    loaded, as in the ascend stage of .ci/run, the example is skipped, saying why."""
    if llm_datadist_ffi.backend != "mock":
        for item in items:
            if Path(str(item.fspath)).parent == Path(__file__).resolve().parent:
                item.add_marker(pytest.mark.skip(
                    reason=f"the example runs on the mock backend; this run loaded {llm_datadist_ffi.backend!r}"))
