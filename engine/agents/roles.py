"""The Coder and the Judge: a provider, a prompt builder and a parser, put together.

Each call returns a *turn* holding the parsed result, the raw reply and the transcript record.
Provider errors propagate as ``LLMError`` with the transcript record of the failed call attached
(``error.record``), so the loop can log failures the same way as successes.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from engine.agents import prompts
from engine.agents.context import PromptContext
from engine.agents.parse import KernelExtraction, extract_kernel, parse_ideas, parse_suggestion
from engine.agents.prompts import Backend, FeedbackKind, Prompt
from engine.agents.suggestion import Suggestion
from engine.agents.transcript import transcript_record, utc_now
from engine.llm.base import LLMReply, Message, Provider, TokenCallback
from engine.llm.errors import LLMError


@dataclass
class CoderTurn:
    prompt: Prompt
    extraction: KernelExtraction
    reply: LLMReply
    record: dict[str, Any]

    @property
    def code(self) -> str | None:
        return self.extraction.code


@dataclass
class JudgeTurn:
    prompt: Prompt
    suggestion: Suggestion
    reply: LLMReply
    record: dict[str, Any]


@dataclass
class IdeasTurn:
    """One Judge call that returned several ranked ideas (``Judge.ideas``)."""

    prompt: Prompt
    ideas: list[Suggestion]
    reply: LLMReply
    record: dict[str, Any]


def follow_up(prompt: Prompt, exchanges: Sequence[tuple[str, str]]) -> Prompt:
    """``prompt`` continued with (the agent's earlier reply, what to do about it) pairs.

    This is how either agent is asked again in the same round — the Coder after a reply with no
    code, the Judge after the human rejected its suggestion — so the model sees what it said and why
    it is asked once more, and the transcript records the whole exchange.
    """
    messages = list(prompt.messages)
    for reply, note in exchanges:
        messages += [Message("assistant", reply), Message("user", note)]
    return dataclasses.replace(prompt, messages=messages)


def rejection_exchanges(rejections: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The Judge's rejected suggestions of this round, each with the human's note."""
    exchanges = []
    for rejection in rejections:
        previous = (rejection.get("suggestion") or {}).get("raw") or "(previous suggestion)"
        note = rejection.get("note") or "no reason given"
        exchanges.append(
            (
                previous,
                f"A human reviewer rejected that suggestion. Their note: {note}\n"
                "Propose a different single issue and plan, in the same JSON format.",
            )
        )
    return exchanges


class _Agent:
    def __init__(
        self, provider: Provider, backend: Backend = "cuda", max_output_tokens: int | None = None
    ) -> None:
        self.provider = provider
        self.backend = backend
        self.max_output_tokens = max_output_tokens

    def _call(
        self, prompt: Prompt, on_token: TokenCallback | None, cancel: threading.Event | None
    ) -> tuple[LLMReply, Any]:
        started = utc_now()
        try:
            reply = self.provider.complete(prompt.to_request(self.max_output_tokens), on_token, cancel)
        except LLMError as exc:
            exc.record = transcript_record(
                prompt,
                model=self.provider.name,
                provider=self.provider.provider,
                started_at=started,
                error=str(exc),
            )
            raise
        return reply, started


class Coder(_Agent):
    """Writes ``ModelNew`` files. A reply with no usable code is a ``no_code`` outcome, not an error."""

    def seed(
        self,
        reference: str,
        *,
        guard_policy: str = "default",
        context: PromptContext | None = None,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> CoderTurn:
        prompt = prompts.coder_seed(reference, self.backend, guard_policy=guard_policy, context=context)
        return self.ask(prompt, on_token, cancel)

    def repair(
        self,
        reference: str,
        kernel: str,
        suggestion: Suggestion | str,
        *,
        failure: str = "",
        guard_policy: str = "default",
        context: PromptContext | None = None,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> CoderTurn:
        prompt = prompts.coder_repair(
            reference, kernel, suggestion, self.backend, failure=failure, guard_policy=guard_policy, context=context
        )
        return self.ask(prompt, on_token, cancel)

    def optimize(
        self,
        reference: str,
        kernel: str,
        suggestion: Suggestion | str,
        *,
        timing: str | None = None,
        guard_policy: str = "default",
        context: PromptContext | None = None,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> CoderTurn:
        prompt = prompts.coder_optimize(
            reference, kernel, suggestion, self.backend, timing, guard_policy=guard_policy, context=context
        )
        return self.ask(prompt, on_token, cancel)

    def ask_for_code(
        self, turn: CoderTurn, *, on_token: TokenCallback | None = None, cancel: threading.Event | None = None
    ) -> CoderTurn:
        """Ask again after ``turn``'s reply held no usable kernel, saying what was missing."""
        note = turn.extraction.note or "no ModelNew file found"
        again = follow_up(
            turn.prompt,
            [
                (
                    turn.reply.text,
                    f"Your reply contained no usable kernel file ({note}). Reply with the complete Python "
                    "file defining class ModelNew, in one ```python block.",
                )
            ],
        )
        return self.ask(again, on_token, cancel)

    def point_out_repeat(
        self,
        turn: CoderTurn,
        number: int,
        measured: str,
        *,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> CoderTurn:
        """Ask again after ``turn``'s kernel turned out to be iteration ``number``'s once more (comments and
        spacing aside): it was measured already (``measured``), so it would teach nothing new."""
        again = follow_up(
            turn.prompt,
            [
                (
                    turn.reply.text,
                    f"That kernel is the same as iteration {number}'s, apart from comments and spacing, and "
                    f"it was measured already ({measured}). Make the change the request asked for, and reply "
                    "with the complete Python file defining class ModelNew, in one ```python block.",
                )
            ],
        )
        return self.ask(again, on_token, cancel)

    def ask(
        self, prompt: Prompt, on_token: TokenCallback | None, cancel: threading.Event | None
    ) -> CoderTurn:
        """Send any Coder prompt and extract the kernel."""
        reply, started = self._call(prompt, on_token, cancel)
        extraction = extract_kernel(reply.text)
        if reply.truncated:
            note = "; ".join(n for n in (extraction.note, "the reply hit the output-token limit") if n)
            extraction = KernelExtraction(extraction.code, extraction.outcome, note)
        record = transcript_record(
            prompt,
            model=self.provider.name,
            provider=self.provider.provider,
            started_at=started,
            reply=reply,
            outcome=extraction.outcome,
        )
        return CoderTurn(prompt, extraction, reply, record)


class Judge(_Agent):
    """Names one critical issue (repair) or one bottleneck and plan (optimize), as a ``Suggestion``."""

    def repair(
        self,
        reference: str,
        kernel: str,
        error_log: str,
        *,
        guard_policy: str = "default",
        context: PromptContext | None = None,
        rejections: Sequence[Mapping[str, Any]] = (),
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> JudgeTurn:
        """One critical issue; ``rejections`` are this round's suggestions the human turned down."""
        prompt = self.repair_prompt(
            reference, kernel, error_log, guard_policy=guard_policy, context=context, rejections=rejections
        )
        return self.ask(prompt, on_token, cancel)

    def repair_prompt(
        self,
        reference: str,
        kernel: str,
        error_log: str,
        *,
        guard_policy: str = "default",
        context: PromptContext | None = None,
        rejections: Sequence[Mapping[str, Any]] = (),
    ) -> Prompt:
        """The prompt ``repair`` sends (``ideas`` asks the same for several issues at once)."""
        prompt = prompts.judge_repair(
            reference, kernel, error_log, self.backend, guard_policy=guard_policy, context=context
        )
        return follow_up(prompt, rejection_exchanges(rejections))

    def optimize(
        self,
        reference: str,
        kernel: str,
        *,
        gpu_spec: str,
        metrics: str | Mapping[str, Any] | list[Any] | None,
        feedback_kind: FeedbackKind = "ncu",
        timing: str | None = None,
        share: str = "",
        guard_policy: str = "default",
        context: PromptContext | None = None,
        rejections: Sequence[Mapping[str, Any]] = (),
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> JudgeTurn:
        """One bottleneck and plan; ``rejections`` are this round's suggestions the human turned down."""
        prompt = self.optimize_prompt(
            reference, kernel, gpu_spec=gpu_spec, metrics=metrics, feedback_kind=feedback_kind, timing=timing,
            share=share, guard_policy=guard_policy, context=context, rejections=rejections,
        )  # fmt: skip
        return self.ask(prompt, on_token, cancel)

    def optimize_prompt(
        self,
        reference: str,
        kernel: str,
        *,
        gpu_spec: str,
        metrics: str | Mapping[str, Any] | list[Any] | None,
        feedback_kind: FeedbackKind = "ncu",
        timing: str | None = None,
        share: str = "",
        guard_policy: str = "default",
        context: PromptContext | None = None,
        rejections: Sequence[Mapping[str, Any]] = (),
    ) -> Prompt:
        """The prompt ``optimize`` sends (``ideas`` asks the same for several plans at once)."""
        prompt = prompts.judge_optimize(
            reference,
            kernel,
            gpu_spec,
            metrics,
            feedback_kind,
            self.backend,
            timing,
            share=share,
            guard_policy=guard_policy,
            context=context,
        )
        return follow_up(prompt, rejection_exchanges(rejections))

    def ideas(
        self,
        prompt: Prompt,
        k: int,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> IdeasTurn:
        """``k`` distinct suggestions from one call (an exploration's branches): ``prompt`` is the round's
        usual Judge prompt (``prompts.judge_repair`` or ``judge_optimize``); fewer come back when the
        reply holds fewer different ideas."""
        asked = prompts.ask_for_ideas(prompt, k)
        reply, started = self._call(asked, on_token, cancel)
        ideas = parse_ideas(reply.text, cast(Any, prompt.kind), k)
        outcome = "json" if any(i.parsed for i in ideas) else "text"
        record = transcript_record(
            asked, model=self.provider.name, provider=self.provider.provider, started_at=started,
            reply=reply, outcome=outcome,
        )  # fmt: skip
        return IdeasTurn(asked, ideas, reply, record)

    def ask(
        self, prompt: Prompt, on_token: TokenCallback | None, cancel: threading.Event | None
    ) -> JudgeTurn:
        """Send any Judge prompt and parse the suggestion."""
        reply, started = self._call(prompt, on_token, cancel)
        suggestion = parse_suggestion(reply.text, cast(Any, prompt.kind))
        outcome = "json" if suggestion.parsed else "text"
        record = transcript_record(
            prompt,
            model=self.provider.name,
            provider=self.provider.provider,
            started_at=started,
            reply=reply,
            outcome=outcome,
        )
        return JudgeTurn(prompt, suggestion, reply, record)
