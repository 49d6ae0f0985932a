"""cudaforge's engine: tasks, evaluation, agents, providers, profiling and the loop.

Plain Python: importable and testable without a terminal. Never imports Textual.
"""
