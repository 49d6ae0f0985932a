"""The evaluator: build, check, time and profile one candidate in a fresh sandboxed worker (ARCHITECTURE.md §3)."""
