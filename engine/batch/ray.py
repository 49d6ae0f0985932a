"""Ray, for ``bench --ray`` and ``evalset --ray``: the import with its install hint, and joining a cluster.

Ray is an optional extra. The batch commands hand a Ray backend to their runner or scheduler only when
``--ray`` is given (``engine.bench.ray_backend``, ``engine.evalset.ray_runner``); those backends import
this module, never the other way round, so the local path never loads Ray (ARCHITECTURE.md §7).
"""

from __future__ import annotations

import logging
import os
from typing import Any

INSTALL_HINT = "--ray needs Ray: pip install 'cudaforge[ray]'"


class RayUnavailable(Exception):
    """Ray is not installed here; the message says how to install it."""


def import_ray() -> Any:
    """The ``ray`` module, or :class:`RayUnavailable` with the install hint."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable(INSTALL_HINT) from None
    return ray


def connect(ray: Any, address: str, workers: int, device: str) -> None:
    """Join the cluster at ``address``, or start a local instance for ``auto``."""
    common = {"logging_level": logging.WARNING, "log_to_driver": False, "ignore_reinit_error": True}
    if address == "auto" and not os.environ.get("RAY_ADDRESS"):
        # a local instance; on CPU its CPU count is the concurrency the user asked for
        extra = {"num_cpus": workers} if device != "cuda" else {}
        ray.init(include_dashboard=False, **extra, **common)
    else:
        ray.init(address=None if address == "auto" else address, **common)


def runtime_env() -> dict[str, Any]:
    """Task options that tell Ray's workers where the package is (a checkout run with ``PYTHONPATH``)."""
    if os.environ.get("PYTHONPATH"):
        return {"runtime_env": {"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}}}
    return {}
