"""A fuzzer of the mock engine's wire protocol (README.md in this directory)."""
