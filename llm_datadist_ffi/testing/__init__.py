"""Tools for testing code that uses LLM-DataDist, on the mock backend.

The parts live in submodules, each importable on its own:

- ``llm_datadist_ffi.testing.strategies``: Hypothesis strategies for cache
  descriptions, block tables, layer ranges and cache keys (needs ``hypothesis``);
- ``llm_datadist_ffi.testing.pytest_plugin``: the pytest plugin (topologies of engine
  processes, faults, lint as errors), registered through the ``pytest11`` entry point;
- ``llm_datadist_ffi.testing.trace``: call traces in the Chrome trace event format.

docs/testing-your-connector.md shows them together.
"""
