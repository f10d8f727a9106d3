"""The test suites' helper modules: drivers and peers that tests start as programs,
``*_support`` modules of shared fixtures and checks, and the generators of the maps
(``rule_map``, ``method_map``) and the citation check (``citations``).

The tests import them by their own names (``import rule_map``): pytest puts
``tests/support/`` on ``sys.path`` (the ``pythonpath`` of its configuration), and a
program a test starts gets the same folders from ``paths.helper_env()``. With
``tests/`` on ``sys.path`` the folder is also the package ``support``
(``from support import rule_map``), for a tool or a session outside pytest. A module is
imported under one of the two names in one process, never both.
"""
