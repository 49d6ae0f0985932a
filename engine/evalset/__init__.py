"""``cudaforge evalset``: judge a folder of existing kernels against their tasks (ARCHITECTURE.md §8).

:mod:`engine.evalset.pairs` finds the (task, kernel) pairs in the arguments;
:mod:`engine.evalset.memory` estimates each task's GPU footprint and shares the GPUs' memory;
:mod:`engine.evalset.store` keeps one EvalResult JSON per kernel under ``OUT/results`` (resume);
:mod:`engine.evalset.scheduler` runs phase 1 (build + check, in parallel) and phase 2 (timing, one
at a time per GPU), locally or on Ray (:mod:`engine.evalset.ray_runner`);
:mod:`engine.evalset.summary`, :mod:`engine.evalset.kernelbench` and :mod:`engine.evalset.plots`
write what a run found.
"""
