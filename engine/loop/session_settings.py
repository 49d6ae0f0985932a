"""What ``session.toml`` records about how a session runs, from a :class:`~engine.config.Config`.

Outside :mod:`engine.loop` (whose package imports the whole loop) so that creating a session (``cudaforge new``, ``run``) can
record it in the session's first commit without importing the loop: a session stopped before its
seed then resumes with the models and round target it was started with.
"""

from __future__ import annotations

from typing import Any

from engine.config import Config


def session_settings(config: Config, device: str) -> dict[str, Any]:
    """What ``session.toml`` records about how the session runs (never a key: only variable names)."""
    return {
        "models": {"coder": config.models.coder, "judge": config.models.judge},
        "loop": {"rounds": config.loop.rounds, "approval": config.loop.approval},
        "eval": {
            "device": device,
            "trials": config.eval.trials,
            "timing_trials": config.eval.timing_trials,
            "seed": config.eval.seed,
            "tolerances": dict(config.eval.tolerances),
        },
        "profile": {"enabled": config.profile.enabled, "metrics": config.profile.metrics},
        "guard": {
            "policy": config.guard.policy,
            "relax": list(config.guard.relax),
            "refuse": list(config.guard.refuse),
        },
    }
