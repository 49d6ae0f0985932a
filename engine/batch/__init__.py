"""What ``bench`` and ``evalset`` share: live progress, set statistics, plots and the Ray backend (ARCHITECTURE.md §7)."""
