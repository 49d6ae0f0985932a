"""The split build: a stock-layout CUDA source rewritten into a torch-free CUDA unit and a C++ unit (ARCHITECTURE.md §3)."""
