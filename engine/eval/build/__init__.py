"""Building a candidate's extension: build folders, cudaforge's precompiled header, the split build (ARCHITECTURE.md §3)."""
