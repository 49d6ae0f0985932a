"""``cudaforge bench``: one headless session per task of a task set, then set-wide statistics.

:mod:`engine.batch.statistics` turns per-task results into rows and statistics (pure functions);
:mod:`engine.bench.runner` discovers tasks and runs their sessions as subprocesses, resumably.
"""
