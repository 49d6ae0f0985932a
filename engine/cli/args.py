"""Argument types and flag groups shared by the command-line modules: bad numbers get one kind of
error (exit 2), and the commands that run the loop take the same flags with the same meaning."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any, NoReturn


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type for whole numbers no smaller than ``minimum``; its message reads after the
    option's name (:class:`OneLineParser`): "--rounds must be 0 or more (got -1)"."""

    def parse(text: str) -> int:
        value = integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {_at_least_words(minimum)} (got {text})")
        return value

    return parse


def _at_least_words(minimum: int) -> str:
    if minimum == 1:
        return "a positive integer"
    if minimum == 0:
        return "0 or more"
    return f"an integer of at least {minimum}"


def integer(text: str) -> int:
    """An argparse type for any whole number (a seed, an iteration number)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer (got {text!r})") from None


def number(text: str) -> float:
    """An argparse type for any number (a share, a price)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number (got {text!r})") from None


class OneLineParser(argparse.ArgumentParser):
    """A parser whose usage errors are one line ("cudaforge run: error: --rounds must be 0 or more
    (got -1)") and a pointer to ``--help``, not the whole usage block above a line that is easy to miss.

    ``add_subparsers`` makes each command's parser of the parser's own class, so the ``cudaforge``
    parser being one makes every command's one (README "Commands": exit 2 for usage errors).
    """

    def error(self, message: str) -> NoReturn:
        head, sep, rest = message.partition(": ")
        if sep and head.startswith("argument ") and rest.startswith("must "):
            message = f"{head.removeprefix('argument ')} {rest}"  # "--rounds must be ..."
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def gpu_list(text: str) -> list[int]:
    """``--gpus 0,1``: CUDA_VISIBLE_DEVICES indices."""
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    if not gpus or not all(g.isdigit() for g in gpus):
        raise argparse.ArgumentTypeError("a comma-separated list of GPU indices, e.g. 0,1")
    return [int(g) for g in gpus]


def visible_gpus(device: str, requested: list[int] | None) -> list[int] | None:
    """The GPUs a command uses: those asked for, else every visible one; None off CUDA."""
    if device != "cuda":
        return None
    if requested:
        return requested
    import torch

    return list(range(torch.cuda.device_count()))


def positive_float(text: str) -> float:
    """An argparse type for numbers above zero (seconds, tolerances, dollars)."""
    value = number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number (got {text})")
    return value


MODEL_PROVIDERS = ("openai", "anthropic", "scripted")  # engine.llm.registry.PROVIDERS, kept import-free


def model_name(text: str) -> str:
    """An argparse type for ``--coder``/``--judge``: ``provider/model``, checked where it was typed
    (so the error names the flag, not a config table the user never wrote)."""
    provider, sep, model = text.strip().partition("/")
    if not sep or not model or provider not in MODEL_PROVIDERS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not provider/model: the provider is one of {', '.join(MODEL_PROVIDERS)} "
            f"(e.g. openai/{text.strip() or 'o3'}, anthropic/claude-sonnet-4-5, scripted/DIR)"
        )
    return text.strip()


def add_loop_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of every command that runs the loop (``run``, ``new``, ``open``): the same names,
    meanings and checks everywhere, turned into config overrides by :func:`loop_overrides`."""
    parser.add_argument(
        "--rounds",
        type=int_at_least(0),
        help="rounds after the seed (default 10); on a resumed session, N more rounds",
    )
    parser.add_argument(
        "--coder", type=model_name, help="provider/model of the Coder (e.g. openai/o3, scripted/DIR)"
    )
    parser.add_argument("--judge", type=model_name, help="provider/model of the Judge")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), help="where kernels run")
    parser.add_argument(
        "--shapes",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="re-check every kernel at perturbed sizes (default [eval] shapes: off)",
    )
    parser.add_argument(
        "--build-budget", type=positive_float, metavar="SECONDS",
        help="seconds all builds of one evaluation may take together (default [eval] build_budget_s: 180)",
    )  # fmt: skip


def loop_overrides(args: argparse.Namespace, stored: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Config overrides from the loop flags, laid over a resumed session's stored settings.

    Flags beat the session's ``session.toml``, which beats the config files, so a resume keeps its
    models and round target unless a flag changes them. ``--rounds`` is taken as given here; the
    caller turns it into "N more rounds" on a resume (:func:`rounds_target`).
    """
    stored = stored or {}
    models = dict(stored.get("models") or {})
    loop = {k: v for k, v in (stored.get("loop") or {}).items() if k == "rounds"}
    models.update({k: v for k in ("coder", "judge") if (v := getattr(args, k, None))})
    if getattr(args, "rounds", None) is not None:
        loop["rounds"] = args.rounds
    if getattr(args, "auto_approve", False):
        loop["approval"] = "auto"
    out: dict[str, Any] = {}
    if models:
        out["models"] = models
    if loop:
        out["loop"] = loop
    if getattr(args, "device", None):
        out["eval"] = {"device": args.device}
    if getattr(args, "shapes", None) is not None:
        out.setdefault("eval", {})["shapes"] = args.shapes
    if getattr(args, "build_budget", None) is not None:
        out.setdefault("eval", {})["build_budget_s"] = args.build_budget
    from engine.cli.guard import guard_overrides

    guard = guard_overrides(args, dict(stored.get("guard") or {}))
    if guard:
        out["guard"] = guard
    return out


def rounds_target(more: int | None, tip: int | None, stored_target: int) -> int:
    """The loop's round limit (the iteration number it stops at) on a resume.

    ``--rounds N`` on a resume means N more rounds after the branch's tip; without it the session
    keeps the target it was started with, so an interrupted run finishes what it set out to do.
    """
    if more is None:
        return stored_target
    return more if tip is None else tip + more


def loop_config(args: argparse.Namespace, stored: Mapping[str, Any] | None = None) -> Any:
    """The one settings resolution of a command that runs the loop (``run``, ``new``, ``open``).

    Config files < a resumed session's stored settings (``stored``, its ``session.toml``) < flags.
    ``--relax``/``--refuse`` add to the ``[guard]`` lists in force (the session's, else the files'),
    as they do for ``eval`` and ``check``; ``--guard`` replaces the policy.
    """
    from engine.config import load_config

    files = load_config()
    base = dict(stored or {})
    base.setdefault("guard", {k: (list(v) if isinstance(v, list) else v) for k, v in vars(files.guard).items()})
    return load_config(overrides=loop_overrides(args, base))
