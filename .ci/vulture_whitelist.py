"""Names the unused-code finder (vulture, in .ci/run) cannot see used: called by a
protocol, by pytest, from a child process's command line, or kept for a reference's
sake. Each is named here with the reason; anything else it reports in the package is
dead code."""
# ruff: noqa: F821
create_module          # compat: importlib's loader protocol calls it
pytest_addoption       # testing.pytest_plugin: pytest hooks
pytest_collection_modifyitems
pytest_runtest_makereport
_child_main            # testing.topology: run by the child's `python -c` command line
exc_info               # acl: __exit__'s protocol parameters
tb                     # testing.topology: __exit__'s protocol parameter
layer_index            # _vendor.v2.llm_types: a vendor signature's parameter
_life                  # v2.llm_datadist: holds the engine's life object, whose finalizer frees the engine
_local_comm_res        # _vendor.v2.cache_manager: the vendor's attribute of the same name
NO_CACHE_KEY           # _vendor.v2.llm_types: the vendor's key kinds, public names
BLOCKS_CACHE_KEY
CACHE_KEY_BY_ID
