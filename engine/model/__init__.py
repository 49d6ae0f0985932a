"""A user's own model as the unit of work: profile it, extract its heavy modules as tasks, apply kernels back.

The parent side (``spec``, ``client``, ``apply``, ``wholemodel``, ``report``) never imports the user's model:
a child process (``python -m engine.model.child``) loads it, traces and profiles it and writes task sources,
and the whole-model check runs in the evaluator's sandboxed worker like any evaluation (ARCHITECTURE.md §9).
"""
