"""Timing that cannot be replayed (ARCHITECTURE.md §3, "Defences"; runs inside the worker).

Timing used to call the candidate on one input set, again and again: a candidate that computes once and
then returns a cached result (kept by storage, or keyed by the inputs' values) looked as fast as a
lookup, and was caught only when the profiling pass happened to repeat inputs. Here:

1. **A probe before timing**, on ``SETS`` input sets the candidate has never seen. Each set's first call
   (*fresh*) and a second call on it (*seen*) are timed with the timer's own flush. Both outputs are
   compared with the reference's on that set, so every set the timing uses is verified. An answer kept
   from another set (the same storage for different inputs) is refused, and so is a candidate whose
   calls on inputs it has seen run ``REPLAY_RATIO`` times faster than its first calls on new ones: a
   value-keyed memo computes on the fresh call and replays on the seen one. An honest kernel takes the
   same time on both (the L2 is flushed before each).
2. **The timing cycles over those sets** (:class:`Rotation`), candidate and reference alike, and keeps
   the outputs of a sample of its calls: the first, a random one and the last. After timing each is
   compared with the reference's output on its set; an output equal to another set's answer is a
   replay, any other mismatch means the timed path is not the checked one.

Why the probe verifies a set with its own first timed call, not before timing: a set the candidate has
been shown once is a set a memo can replay, and the probe needs first encounters to time.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SETS = 3  # input sets the timing cycles over
REPLAY_RATIO = 2.0  # fresh-call time over seen-call time beyond which results are being replayed
REPLAY_MIN_GAP_MS = 0.02  # ... and by at least this much (launch jitter on µs kernels is not a memo)


@dataclass
class Verdict:
    """What the probe or the sample check found: ``rule`` "output-replayed" (refuse by that rule),
    ``incorrect`` (a plain wrong answer), or neither."""

    rule: str | None = None
    incorrect: bool = False
    message: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    by_time: bool = False  # named from the fresh/seen times alone: the caller confirms it on new sets


def _storages(output: Any) -> set[int]:
    from engine.guard.runtime import flatten_tensors

    return {t.untyped_storage().data_ptr() for t in flatten_tensors(output) if t.numel()}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclass
class Probe:
    """The probe's measurements: per set, the fresh and seen call times and the reference's output."""

    fresh_ms: list[float] = field(default_factory=list)
    seen_ms: list[float] = field(default_factory=list)
    expected: list[Any] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {
            "sets": len(self.expected),
            "fresh_median_ms": _median(self.fresh_ms) if self.fresh_ms else None,
            "seen_median_ms": _median(self.seen_ms) if self.seen_ms else None,
        }


def probe(
    candidate: Callable[..., Any],
    reference: Callable[..., Any],
    sets: list[list[Any]],
    time_once: Callable[[Callable[[], object]], float],
    compare: Callable[[Any, Any], Any],
) -> tuple[Probe, Verdict]:
    """Run step 1 of the module docstring; ``time_once`` is the timer's flushed single-call clock,
    ``compare(expected, got)`` the evaluator's comparison (its ``.passed`` and ``.message``).

    A replay by time is named only when every set shows it (each fresh call ``REPLAY_RATIO`` times its
    seen call); the verdict says ``by_time`` so the caller can confirm it with a second probe on new
    sets, and scheduling noise on a busy machine cannot refuse an honest kernel."""
    measured = Probe()
    outputs: list[tuple[Any, Any]] = []  # per set: (first call's output, second call's), all kept alive
    for inputs in sets:
        got: list[Any] = []
        call = _appending(candidate, inputs, got)
        measured.fresh_ms.append(time_once(call))
        measured.seen_ms.append(time_once(call))
        outputs.append((got[0], got[1]))
        measured.expected.append(reference(*inputs))
    figures = measured.figures()
    owners: dict[int, str] = {}  # storage -> the call whose output holds it (every output is alive)
    for index, pair in enumerate(outputs):
        for which, output in zip(("first", "second"), pair, strict=True):
            this = f"the {which} call on timing input set {index}"
            for storage in _storages(output):
                other = owners.setdefault(storage, this)
                if other != this:
                    return measured, Verdict(
                        "output-replayed",
                        message=f"{this} returned the same storage as {other}, whose output was still alive: "
                        "a result kept and returned again",
                        figures=figures,
                    )
    for index, pair in enumerate(outputs):
        for which, output in zip(("first", "second"), pair, strict=True):
            wrong = _judge(output, index, measured.expected, compare, f"the {which} call on timing input set {index}")
            if wrong is not None:
                wrong.figures = figures
                return measured, wrong
    if replayed(measured):
        fresh, seen = figures["fresh_median_ms"], figures["seen_median_ms"]
        return measured, Verdict(
            "output-replayed",
            message=f"calls on inputs it had already seen took {seen:.4f} ms (median of {len(sets)} sets), its "
            f"first calls on new inputs {fresh:.4f} ms: more than {REPLAY_RATIO:g}x apart on every set, so "
            "results are being replayed (a cache keyed by the inputs)",
            figures=figures,
            by_time=True,
        )
    return measured, Verdict(figures=figures)


def replayed(measured: Probe) -> bool:
    """Every set's first call ``REPLAY_RATIO`` times slower than its second, the medians
    ``REPLAY_MIN_GAP_MS`` apart."""
    if not measured.fresh_ms:
        return False
    every = all(f > REPLAY_RATIO * s for f, s in zip(measured.fresh_ms, measured.seen_ms, strict=True))
    return every and _median(measured.fresh_ms) - _median(measured.seen_ms) > REPLAY_MIN_GAP_MS


def _judge(output: Any, index: int, expected: list[Any], compare: Callable[[Any, Any], Any], what: str) -> Verdict | None:
    """None when ``output`` is set ``index``'s answer; else a replay (it is another set's answer) or a
    plain wrong answer."""
    outcome = compare(expected[index], output)
    if outcome.passed:
        return None
    for other, answer in enumerate(expected):
        if other != index and compare(answer, output).passed:
            return Verdict("output-replayed", message=f"{what} returned the answer for set {other}: a result replayed from other inputs")
    return Verdict(incorrect=True, message=f"{what}: {outcome.message}")


def _appending(fn: Callable[..., Any], inputs: list[Any], into: list[Any]) -> Callable[[], None]:
    def call() -> None:
        into.append(fn(*inputs))

    return call


class Rotation:
    """A zero-argument callable for the timer: each call runs ``fn`` on the next of ``sets`` in turn,
    keeping the outputs of call 0, of one random call below ``expected_calls`` and of the latest call."""

    def __init__(self, fn: Callable[..., Any], sets: list[list[Any]], expected_calls: int, seed: int = 0) -> None:
        self.fn = fn
        self.sets = sets
        self.calls = 0
        self.sampled = {0, random.Random(seed).randrange(1, max(2, expected_calls))}
        self.kept: dict[int, tuple[int, Any]] = {}  # call number -> (set index, output)
        self.latest: tuple[int, int, Any] | None = None

    def __call__(self) -> Any:
        which = self.calls % len(self.sets)
        output = self.fn(*self.sets[which])
        if self.calls in self.sampled:
            self.kept[self.calls] = (which, output)
        self.latest = (self.calls, which, output)
        self.calls += 1
        return output

    def samples(self) -> list[tuple[int, int, Any]]:
        """(call number, set index, output) of every kept call, the latest included."""
        out = [(call, which, output) for call, (which, output) in sorted(self.kept.items())]
        if self.latest is not None and self.latest[0] not in self.kept:
            out.append(self.latest)
        return out


def check_samples(rotation: Rotation, expected: list[Any], compare: Callable[[Any, Any], Any]) -> Verdict:
    """Step 2's check: each kept output against the reference's answer on its set."""
    owners: dict[int, int] = {}  # storage -> the timed call whose kept output holds it
    samples = rotation.samples()
    for call, which, output in samples:
        for storage in _storages(output):
            other = owners.setdefault(storage, call)
            if other != call:
                return Verdict(
                    "output-replayed",
                    message=f"timed call {call} (input set {which}) returned the same storage as timed call {other}, "
                    "whose output was still alive: a result kept and returned again",
                )
    for call, which, output in samples:
        wrong = _judge(output, which, expected, compare, f"timed call {call} of {rotation.calls} (input set {which})")
        if wrong is not None:
            return wrong
    return Verdict()
