"""Timing that cannot be replayed (ARCHITECTURE.md §3, "Defences"; runs inside the worker).

Timing used to call the candidate on one input set, again and again: a candidate that computes once and
then returns a cached result (kept by storage, or keyed by the inputs' pointers or values) looked as fast
as a lookup, and was caught only when the profiling pass happened to repeat inputs. Here:

1. **The timing cycles over ``SETS`` input sets** (:class:`Rotation`), candidate and reference alike.
   The timer's warm-up makes one call of each model on each set, and those outputs are compared before
   any call is timed, so every set the timing uses is verified. The outputs of the first timed call, a
   random one and the last are kept and compared with their sets' answers after timing: an output equal
   to another set's answer is a replay, any other mismatch means the timed path is not the checked one,
   and the same storage for two kept calls is a result returned again.
2. **A probe after timing**, on ``PROBE_SETS`` input sets the candidate has never seen. First one call
   on a timing set per probe set (*seen*: called dozens of times by then), before any new input could push
   it out of a cache; then each probe set's first call (*fresh*, after the reference's untimed call on
   it). Both timed with the timer's own flush; each output compared with its answer, and by storage with
   the outputs the timing keeps alive, as soon as it returns, and let go after its set (see
   :func:`probe`). A candidate whose fresh calls run ``REPLAY_RATIO`` times slower than its seen ones is
   replaying: a memo keyed by the inputs (pointers or values) computes on the fresh call and looks up on
   the seen one, where an honest kernel takes the same time (the L2 is flushed before each). A memo that
   waits for repeats before it replays is on for the timing's sets by then, and one that keeps only a
   few answers must keep the timing's three to gain, which nothing new has pushed out yet. The seen
   calls are made right before the fresh ones so that the GPU's clocks and the host's state are the same
   for both: compared with the lower quartile of the timing's own calls instead, an honest cuDNN
   convolution's first call after timing was more than 1.5x slower on the H100 (session 21). So the
   timing's own calls never refuse by time; they only send a seen call to the binary (step 3). On CPU the
   clock is the process's CPU time (``busy_time_once``): a preempted call keeps its work, so a loaded
   machine neither hides a memo nor makes an honest kernel's first call look like one. Until session 21
   the probe made three seen calls on each probe set's own tensors: ten model calls in all, now six.
3. **The binary decides where it can.** Time alone does not separate a memo from an honest kernel: on the
   H200 an honest kernel's fresh call measured 2.5x its seen one, a value-keyed memo's 2.4x
   (benchmarks/RESULTS.md). So on CUDA, where the launch check attributed kernels to the candidate's own
   binary, seen calls (or the timing's own median call) ``SUSPECT_RATIO`` times faster than fresh ones
   have one call on a timing set run under the profiler: if it launches none of the candidate's own
   kernels, it returned a result it kept (``output-replayed``); if it launches them, the time difference
   is not a replay and nothing is refused.
   Where every extension was split-built, the ablation stage answers the same question for the cost of
   one call (the profiler a timing worker has not started costs seconds: 4-6 s a pair on the H200's
   leaderboard run, where honest µs kernels' fresh calls measured up to 13x their seen ones): the probe
   then *defers* (``DEFERRED``), and that stage calls the candidate on a timing set's very tensors, its
   own kernels switched off; an answer still right there, and wrong on new inputs, is a replay
   (engine.eval.late).
   Only where there is no such evidence (CPU, no attribution) does time decide, at ``REPLAY_RATIO`` and
   confirmed by the caller on more new sets, so scheduling noise cannot refuse an honest kernel.

Where the reference itself changes its inputs, the candidate may too: the probe then compares each call
with the reference run on a copy of the inputs as that call found them, and the timed calls' kept outputs
(whose inputs' state is not known) are not compared.

Not caught (session 26's review): a memo that answers from its cache only for about as many repeats of a
set as the timing makes, then computes again, so the probe's seen call runs its own kernels (the timing's
median then makes it suspect, and the look at the binary clears it); a memo that gains less than
``SUSPECT_RATIO`` over its own first call, or less than ``REPLAY_MIN_GAP_MS``; one that copies its kept
answer out through a kernel of its own, which the launch check and the ablation both count as its work.
On CPU, where time alone decides, a value-keyed memo whose compute is cheap enough: the trust tests' memo
(``tests/fixtures/trust/cpu_trust.py``, a 128x128 matmul) built with ``-O3`` instead of ``-O2`` measured
fresh 0.80 ms, seen 0.22 ms (3.6x, under ``REPLAY_RATIO``) and was judged correct, timed at 0.11 ms; with
``-O2``, 3.25 ms against 0.16 ms, refused (session 28, the 2-core machine).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

SETS = 3  # input sets the timing cycles over
PROBE_SETS = 2  # new input sets per probe after timing
# Fresh-call time over seen-call time beyond which results are being replayed. A memo pays only where the
# work costs far more than the lookup (a copy of the answer, or a read of the inputs to compare them), so
# its ratio is large; honest kernels' first calls on new memory measured up to 2.5x (benchmarks/RESULTS.md).
REPLAY_RATIO = 4.0
REPLAY_MIN_GAP_MS = 0.02  # ... and by at least this much (launch jitter on µs kernels is not a memo)
# Fresh over seen beyond which, where the binary can tell, the seen call's own launches are looked at.
SUSPECT_RATIO = 1.5

DEFERRED = "deferred"  # what an OwnLaunches answers where the ablation stage decides (step 3)

# Which of the candidate's own kernels one call launched; None when that cannot be told here, DEFERRED
# when a later stage tells it.
OwnLaunches = Callable[[Callable[[], object]], "list[str] | str | None"]

Compare = Callable[[Any, Any], Any]  # (expected, got) -> the evaluator's comparison (.passed, .message)


@dataclass
class Verdict:
    """What a check found: ``rule`` "output-replayed" (refuse by that rule), ``incorrect`` (a plain
    wrong answer), or neither; ``by_time``: named from the fresh/seen times alone."""

    rule: str | None = None
    incorrect: bool = False
    message: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    by_time: bool = False
    deferred: bool = False  # suspect, and the ablation stage decides on the set the probe saw
    suspect: list[Any] | None = None  # deferred: the inputs of the probe's fastest seen call, for the ablation


def _storages(output: Any) -> set[int]:
    from engine.guard.runtime import flatten_tensors

    return {t.untyped_storage().data_ptr() for t in flatten_tensors(output) if t.numel()}


def _shared_storage(outputs: list[tuple[str, Any]], inputs: list[list[Any]]) -> Verdict | None:
    """A replay when two of these (all alive) outputs share storage. An output that is one of the
    ``inputs`` (in place) is ``output-aliases-input``'s to judge, not a replay."""
    theirs = set().union(*(_storages(list(s)) for s in inputs)) if inputs else set()
    owners: dict[int, str] = {}
    for name, output in outputs:
        for storage in _storages(output) - theirs:
            other = owners.setdefault(storage, name)
            if other != name:
                return Verdict(
                    "output-replayed",
                    message=f"{name} returned the same storage as {other}, whose output was still alive: "
                    "a result kept and returned again",
                )
    return None


def _judge(output: Any, index: int, expected: list[Any], compare: Compare, what: str) -> Verdict | None:
    """None when ``output`` is set ``index``'s answer; else a replay (it is another set's answer) or a
    plain wrong answer."""
    others = [(f"set {other}", answer) for other, answer in enumerate(expected) if other != index]
    return _judge_among(output, expected[index], others, compare, what)


def _judge_among(output: Any, answer: Any, others: list[tuple[str, Any]], compare: Compare, what: str) -> Verdict | None:
    """None when ``output`` is ``answer``; a replay when it is one of the ``others`` (named answers to
    other inputs); else a plain wrong answer."""
    outcome = compare(answer, output)
    if outcome.passed:
        return None
    for name, other in others:
        if compare(other, output).passed:
            return Verdict("output-replayed", message=f"{what} returned the answer for {name}: a result replayed from other inputs")
    return Verdict(incorrect=True, message=f"{what}: {outcome.message}")


class Rotation:
    """A zero-argument callable for the timer: each call runs ``fn`` on the next of ``sets`` in turn. It
    keeps the outputs of its first ``len(sets)`` calls (the warm-up's, one per set), of one random call
    below ``expected_calls`` and of the latest call."""

    def __init__(self, fn: Callable[..., Any], sets: list[list[Any]], expected_calls: int, seed: int = 0) -> None:
        self.fn = fn
        self.sets = sets
        self.calls = 0
        self.expected_calls = expected_calls
        self.kept: dict[int, tuple[int, Any]] = {}  # the first round's outputs: call number -> (set index, output)
        self.latest: tuple[int, int, Any] | None = None
        self.previous: tuple[int, int, Any] | None = None  # the call before the latest
        self.drawn: tuple[int, int, Any] | None = None  # one call kept at random (sample_from_here)
        self._draws: random.Random | None = None
        self._next_draw = -1
        self._weight = 0.0

    def __call__(self) -> Any:
        which = self.calls % len(self.sets)
        output = self.fn(*self.sets[which])
        if self.calls < len(self.sets):
            self.kept[self.calls] = (which, output)
        if self.calls == self._next_draw:
            self.drawn = (self.calls, which, output)
            self._schedule_draw()
        self.previous, self.latest = self.latest, (self.calls, which, output)
        self.calls += 1
        return output

    def sample_from_here(self) -> None:
        """From the next call on, keep one call drawn uniformly at random among all the calls that will
        have been made, however many the timing's budget allows (reservoir sampling, Li's algorithm L,
        one integer compared per call; seeded from the system's entropy, not a seed a candidate could
        read). A draw fixed among calls planned ahead missed whenever the timing stopped short of it."""
        self._draws = random.Random(random.SystemRandom().getrandbits(64))
        self._weight = 1.0  # times a uniform draw at each kept call: algorithm L's W for a reservoir of one
        self._next_draw = self.calls  # the first candidate call is kept until a later one replaces it

    def _schedule_draw(self) -> None:
        draws = self._draws
        if draws is None:
            self._next_draw = -1
            return
        self._weight *= draws.random()
        if self._weight <= 0.0 or self._weight >= 1.0:
            self._next_draw = -1  # no further replacement (a weight of 0 would divide by 0 below)
            return
        self._next_draw = self.calls + int(math.log(1.0 - draws.random()) / math.log(1.0 - self._weight)) + 1

    def alive(self) -> list[tuple[str, Any]]:
        """The outputs this rotation keeps alive, named: the warm-up's and the kept timed calls'."""
        warm = [(f"the warm-up call on input set {i}", out) for i, out in enumerate(self.first_outputs())]
        return warm + [(f"timed call {call} (input set {which})", out) for call, which, out in self.samples()]

    def first_outputs(self) -> list[Any]:
        """The output of the first call on each set (the warm-up's), in set order."""
        return [self.kept[call][1] for call in range(len(self.sets)) if call in self.kept]

    def samples(self) -> list[tuple[int, int, Any]]:
        """(call number, set index, output) of the call drawn at random after the first round and of the
        latest; where the draw is the latest, the call before it instead, so two calls are checked
        whenever two were timed."""
        first = len(self.sets)
        drawn = self.drawn
        if drawn is not None and self.latest is not None and drawn[0] == self.latest[0]:
            drawn = self.previous
        out = [drawn] if drawn is not None and drawn[0] >= first else []
        if self.latest is not None and self.latest[0] >= first and (not out or out[0][0] != self.latest[0]):
            out.append(self.latest)
        return out


def check_warmup(candidate: Rotation, reference: Rotation, compare: Compare) -> Verdict:
    """Step 1's check before any timed call: each set's first candidate output against the reference's."""
    expected = reference.first_outputs()
    got = candidate.first_outputs()
    shared = _shared_storage([(f"the warm-up call on input set {i}", out) for i, out in enumerate(got)], candidate.sets)
    if shared is not None:
        return shared
    for index, output in enumerate(got):
        wrong = _judge(output, index, expected, compare, f"on timing input set {index}, before timing")
        if wrong is not None:
            return wrong
    return Verdict()


def check_samples(candidate: Rotation, expected: list[Any], compare: Compare) -> Verdict:
    """Step 1's check after timing: each kept timed output against the reference's answer on its set."""
    samples = candidate.samples()
    shared = _shared_storage(candidate.alive(), candidate.sets)
    if shared is not None:
        return shared
    for call, which, output in samples:
        wrong = _judge(output, which, expected, compare, f"timed call {call} of {candidate.calls} (input set {which})")
        if wrong is not None:
            return wrong
    return Verdict()


@dataclass
class Probe:
    """One probe's times per set: the first call on new inputs, and a call on a timing set."""

    fresh_ms: list[float] = field(default_factory=list)
    seen_ms: list[float] = field(default_factory=list)  # a call on a timing set, before any new input
    # the timing's own median call, by the timing's clock (CUDA events; the wall clock on CPU, where the
    # probe's clock is CPU time and this figure decides nothing): what the speedup credits
    timed_ms: float | None = None

    def figures(self) -> dict[str, Any]:
        return {
            "probe_sets": len(self.fresh_ms),
            "fresh_median_ms": median(self.fresh_ms) if self.fresh_ms else None,
            "seen_median_ms": median(self.seen_ms) if self.seen_ms else None,
            "timed_median_ms": self.timed_ms,
        }

    def replayed(self) -> bool:
        """Every set's first call ``REPLAY_RATIO`` times slower than the least seen call (one seen call
        that a busy machine slowed does not hide a replay), the medians ``REPLAY_MIN_GAP_MS`` apart."""
        if not self.fresh_ms:
            return False
        least = min(self.seen_ms)
        every = all(f > REPLAY_RATIO * least for f in self.fresh_ms)
        return every and median(self.fresh_ms) - median(self.seen_ms) > REPLAY_MIN_GAP_MS

    def suspect(self) -> bool:
        """Seen calls, or the timing's own median call, ``SUSPECT_RATIO`` times faster than fresh calls by
        the medians, and ``REPLAY_MIN_GAP_MS`` apart: on µs kernels launch jitter alone crosses the ratio,
        and the profiler a timing worker has not started yet costs seconds (4-5 s a pair on the H200's
        leaderboard run). The timing's median counts because it is what the speedup credits: on the H100
        a value-keyed memo whose lookup syncs the host (``torch::equal``) took 0.56 ms on its seen probe
        calls and 0.75 ms on fresh ones (1.35x, not suspect), while the timing had credited it twice an
        honest kernel's speed (session 26)."""
        if not self.fresh_ms:
            return False
        fresh, seen = median(self.fresh_ms), median(self.seen_ms)
        least = seen if self.timed_ms is None else min(seen, self.timed_ms)
        return fresh > SUSPECT_RATIO * least and fresh - least > REPLAY_MIN_GAP_MS


def credited_words(timed_ms: float | None) -> str:
    """The timing's credited call in a refusal's words, where the probe had it (the gate it may have
    tripped alone, :meth:`Probe.suspect`)."""
    return "" if timed_ms is None else f" (the timing credited it {timed_ms:.4f} ms a call)"


def _seen_calls(
    candidate: Callable[..., Any],
    count: int,
    time_once: Callable[[Callable[[], object]], float],
    compare: Compare,
    timed: Rotation,
    timed_answers: list[Any] | None,
    kept: list[tuple[str, Any]],
    timed_named: list[tuple[str, Any]],
    measured: Probe,
) -> Verdict | None:
    """The probe's ``count`` calls on the timing's sets, each timed into ``measured.seen_ms`` and judged as
    it returns (by storage against ``kept``, what the timing keeps alive, and by value against
    ``timed_named``, the timing sets' answers, where they are known), then let go; the first failure's
    verdict, else None."""
    for index in range(count):
        which = index % len(timed.sets)
        got: list[Any] = []
        measured.seen_ms.append(time_once(lambda: got.append(candidate(*timed.sets[which]))))  # noqa: B023 - called at once
        name = f"a call on timing set {which} after timing"
        wrong = _shared_storage([*kept, (name, got[0])], list(timed.sets))
        if wrong is None and timed_answers is not None:
            others = [named for i, named in enumerate(timed_named) if i != which]
            wrong = _judge_among(got[0], timed_answers[which], others, compare, name)
        if wrong is not None:
            return wrong
    return None


def probe(
    candidate: Callable[..., Any],
    reference: Callable[..., Any],
    sets: list[list[Any]],
    time_once: Callable[[Callable[[], object]], float],
    compare: Compare,
    timed: Rotation,
    timed_answers: list[Any] | None,
    copies: Callable[[list[Any]], list[Any]] | None = None,
    own_launches: OwnLaunches | None = None,
    timed_ms: float | None = None,
) -> tuple[Probe, Verdict]:
    """Steps 2 and 3 of the module docstring; ``time_once`` is the timer's flushed single-call clock,
    ``timed`` the rotation the candidate was timed through (its sets are the seen ones, and the outputs
    it keeps alive must never be handed out again) and ``timed_answers`` those sets' answers (None where
    the reference changes its inputs; ``copies`` then copies a set, so each call is compared with the
    reference on the inputs as it found them). ``own_launches``: where the candidate's own kernels are
    known from its binary (step 3); ``timed_ms``: the timing's median candidate call, which a fresh call
    far slower than it also makes suspect (:meth:`Probe.suspect`). The seen calls come before any new
    input: with them after, a memo of three answers that evicts its oldest passed (session 22's review).
    Each output is let go after its set: kept to the end, the next call allocated inside its timed span,
    which the timing never did."""
    measured = Probe(timed_ms=timed_ms)
    seen_sets = timed.sets
    kept = timed.alive()
    timed_named = [(f"timing set {i}", answer) for i, answer in enumerate(timed_answers or [])]
    wrong = _seen_calls(candidate, len(sets), time_once, compare, timed, timed_answers, kept, timed_named, measured)
    if wrong is not None:
        wrong.figures = measured.figures()
        return measured, wrong
    answers: list[tuple[str, Any]] = []  # the probe sets' answers so far, named
    for index, inputs in enumerate(sets):
        got = []
        # The reference runs first, untimed: it gives the answer and touches the new inputs' memory, so the
        # candidate's first call does not pay for the pages' first use (on the H200 an honest kernel's first
        # call on new memory measured up to 2.5x its second when it went first).
        answer = reference(*copies(inputs)) if copies else reference(*inputs)
        measured.fresh_ms.append(time_once(lambda: got.append(candidate(*inputs))))  # noqa: B023 - called at once
        if copies:  # an in-place answer is its input: keep it as it was
            got[-1] = copies([got[-1]])[0]
        name = f"the first call on probe set {index}"
        wrong = _shared_storage([*kept, (name, got[0])], [*seen_sets, inputs]) or _judge_among(
            got[0], answer, answers + timed_named, compare, name
        )
        if wrong is not None:
            wrong.figures = measured.figures()
            return measured, wrong
        answers.append((f"probe set {index}", answer))
        got.clear()  # let go before the next set's call, as the timing's calls let theirs go
    figures = measured.figures()
    fresh, seen = figures["fresh_median_ms"], figures["seen_median_ms"]
    if own_launches is not None and measured.suspect():
        # the timing set whose seen call took least: where a cache answered, if one did
        again = seen_sets[min(range(len(measured.seen_ms)), key=measured.seen_ms.__getitem__) % len(seen_sets)]
        launched = own_launches(lambda: candidate(*again))
        if launched == DEFERRED:
            figures["decided_by"] = "ablation"
            return measured, Verdict(figures=figures, deferred=True, suspect=again)
        if isinstance(launched, list):
            figures["seen_call_own_kernels"] = launched
            if launched:  # its own kernels ran on inputs it had seen: whatever made it faster, not a replay
                return measured, Verdict(figures=figures)
            return measured, Verdict(
                "output-replayed",
                message=f"after timing, a call on inputs it had seen many times launched none of its own kernels, "
                f"which its checked forward launched, and took {seen:.4f} ms where its first calls on new inputs "
                f"took {fresh:.4f} ms{credited_words(measured.timed_ms)}: it returns results it kept (a cache keyed "
                "by the inputs)",
                figures=figures,
            )
    if measured.replayed():
        return measured, Verdict(
            "output-replayed",
            message=f"after timing, calls on inputs it had seen took {seen:.4f} ms, its first calls on new inputs "
            f"{fresh:.4f} ms (medians of {len(sets)} sets): more than {REPLAY_RATIO:g}x apart on every set, so "
            "results are being replayed (a cache keyed by the inputs)",
            figures=figures,
            by_time=True,
        )
    return measured, Verdict(figures=figures)
