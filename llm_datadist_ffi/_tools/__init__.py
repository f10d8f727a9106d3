"""The command-line tools behind ``python -m llm_datadist_ffi`` (``bench``, ``demo``,
``docs``, ``errors``) and the generator ``python -m llm_datadist_ffi._tools._codegen``.

No tier imports these modules; they import the tiers. docs/design.md draws the layers.
"""
