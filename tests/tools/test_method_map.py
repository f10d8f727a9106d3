"""docs/method-map.md is generated from the tests' calls (tests/support/method_map.py):
the committed page is never stale, it lists every public method of the four API
classes, and it finds calls in tests, in state machines and through a module's own
helpers, and nowhere else."""
from __future__ import annotations

import textwrap
from pathlib import Path

import method_map

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_method_map_equals_the_generator_output() -> None:
    committed = method_map.PAGE.read_text(encoding="utf-8")
    assert committed == method_map.render(), (
        f"docs/method-map.md is stale; regenerate it with `{method_map.REGENERATE_COMMAND}`")


def test_the_methods_are_the_public_methods_of_the_four_classes() -> None:
    methods = method_map.public_methods()
    # written out here, not read from the classes: a method that disappears is noticed
    assert methods["pull_blocks"] == ["CacheManager", "KvCacheManager"]
    assert methods["pull_kv_blocks"] == ["LlmDataDist"]
    assert methods["allocate_cache"] == ["LlmDataDist", "CacheManager", "KvCacheManager"]
    assert methods["link_clusters"] == ["LLMDataDist"]
    assert methods["register_blocks_cache"] == ["CacheManager"]
    assert methods["get_cache_tensors"] == ["KvCacheManager"]
    assert "cache_manager" not in methods        # a property
    assert not any(name.startswith("_") for name in methods)


def test_calls_are_found_in_tests_machines_and_the_modules_own_helpers() -> None:
    source = textwrap.dedent("""
        def _pull(manager):
            manager.pull_blocks(1, 2, [0], [0])

        def _twice(manager):
            _pull(manager)

        def test_direct(dd):
            dd.link_clusters([], 1000)

        def test_through_two_helpers(manager):
            _twice(manager)

        def test_unrelated(x):
            x.pull_nothing()
            pull_cache(x)                 # a plain name is no method call

        class Machine:
            def rule(self):
                self.engine.pull_kv_blocks(1, [0], [0])

        def helper_only(manager):
            manager.push_blocks(1, 2)
        """)
    found = method_map.calls_by_test(source, {"pull_blocks", "link_clusters", "pull_kv_blocks", "push_blocks",
                                              "pull_cache"})
    assert found == {"test_direct": {"link_clusters"}, "test_through_two_helpers": {"pull_blocks"},
                     "Machine": {"pull_kv_blocks"}}


def test_the_page_lists_a_known_test_under_its_method() -> None:
    page = method_map.render()
    section = page.split("\n## pull_blocks\n", 1)[1].split("\n## ", 1)[0]
    line = next(text for text in section.splitlines() if text.startswith("- `vendor/test_vendor_kv_cache_manager`:"))
    assert "`test_v1_pull_blocks_moves_the_listed_blocks_with_layer_ranges`" in line
    assert "| [`pull_blocks`](#pull_blocks) | CacheManager, KvCacheManager |" in page


def test_the_testing_guide_links_the_map() -> None:
    assert "(method-map.md)" in (REPO / "docs" / "testing.md").read_text(encoding="utf-8")
