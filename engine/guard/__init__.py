"""Anti-cheating guards for candidate kernels (ARCHITECTURE.md §3, "Guard policy").

The static part (``engine.guard.static.check_source``) reads the candidate's source and refuses kernels
whose forward does its work in PyTorch, falls back on errors, hides work from the timer, or tampers with
the evaluator; the runtime part (``engine.guard.runtime``) checks what the worker sees. Rule ids, policy
names and their meaning: ``engine.guard.rules``, which imports nothing, so the config can validate
against it without loading the guard. This package file imports nothing either, for the same reason.
"""
