"""The step-wise optimisation loop: state machine, approval gates, session-derived state (ARCHITECTURE.md §2).

``engine.loop.factory.create_loop`` is the TUI's entry point and ``make_loop`` the headless run's; the
state machine is ``engine.loop.machine``. This package file imports nothing: importing one light module
of the loop (``engine.loop.session_settings``) must not load the loop and the evaluator behind it.
"""
