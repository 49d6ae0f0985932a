"""Every ``cudaforge`` command that is not the TUI's own: ``tui/cli.py`` dispatches to these (ARCHITECTURE.md §8)."""
