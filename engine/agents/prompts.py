"""Prompt builders for the Coder and the Judge, from the template files in ``templates/``.

Five kinds, following the CudaForge method: Coder *seed* (reference + one worked example of the
fast ``ModelNew`` layout), Coder *repair* / *optimize* (current kernel + the approved suggestion),
Judge *repair* (error log + reference + kernel → one critical issue as JSON) and Judge *optimize*
(hardware + reference + kernel + profiler feedback → one bottleneck and one plan as JSON).
Beyond the paper's inputs every prompt carries the standing facts of a session (the target GPU, the
correctness bar and the guard policy, from :mod:`engine.agents.context`) and a bounded table of the
branch's earlier rounds, so an idea that failed or was rejected is not proposed again. The repair
prompts carry the failure itself, clipped with visible markers. Each section is bounded by clipping,
never dropped silently (ARCHITECTURE.md, "What each agent receives at each step").
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from string import Template
from typing import Any, Literal

from engine.agents.context import PromptContext, check_policy, guard_changes_text
from engine.agents.suggestion import Suggestion
from engine.llm.base import LLMRequest, Message

Backend = Literal["cuda", "cpu"]
FeedbackKind = Literal["ncu", "torch-profiler", "none"]
BACKENDS = ("cuda", "cpu")
FEEDBACK_KINDS = ("ncu", "torch-profiler", "none")

#: Logs longer than this keep their head (first compiler errors) and tail (the Python traceback).
MAX_LOG_CHARS = 12_000
MAX_METRICS_CHARS = 16_000
MAX_HISTORY_CHARS = 4_000
MAX_SHARE_CHARS = 2_000

_TARGET = {"cuda": "an NVIDIA GPU", "cpu": "the CPU"}
#: what counts as the candidate's own code, per backend (the policy texts name it)
_OWN_CODE = {
    "cuda": "`__global__` kernels in your `cuda_source` (and the C++ in `cpp_source` that launches them)",
    "cpu": "C++ functions in your `cpp_source` that loop over the raw data",
}
_SHARE_SENTENCE = {
    "cuda": "The harness measures the share of the forward's device time spent in your own kernels against"
    " library kernels (cuBLAS, cuDNN, ATen), records it with the result and shows the reviewer the largest"
    " library kernels left, as candidates to replace next.",
    "cpu": "On the CPU the share of time in your own code is not measured; the harness checks that your"
    " compiled functions run on every forward.",
}
_UNKNOWN_TARGET = {
    "cuda": "GPU: not known yet (it is read from the first evaluation); write for a recent NVIDIA data-center GPU.",
    "cpu": "CPU: the machine running the evaluation.",
}
_LANGUAGE = {"cuda": "CUDA", "cpu": "C++"}
_FEEDBACK_NOTE = {
    "ncu": "Feedback: Nsight Compute (NCU) hardware counters for each of the candidate's own kernels: the measured"
    " values (the CudaForge paper's 24 metrics and more), then our reading of them and ncu's rule results, below.",
    "torch-profiler": "Feedback: NCU was not available, so the numbers below come from torch.profiler — per-kernel "
    "and per-operator durations, no hardware counters. Infer the bottleneck from durations, the "
    "hardware figures and the code.",
    "none": "Feedback: no profiler data is available in this run. Infer the bottleneck from the code, the hardware "
    "figures and the timing alone.",
}


@dataclass(frozen=True)
class Prompt:
    """A ready prompt: what goes to ``Provider.complete`` and into the transcript."""

    role: Literal["coder", "judge"]
    kind: Literal["seed", "repair", "optimize"]
    system: str
    messages: list[Message] = field(default_factory=list)

    def to_request(self, max_output_tokens: int | None = None) -> LLMRequest:
        return LLMRequest(
            system=self.system, messages=list(self.messages), max_output_tokens=max_output_tokens
        )


@functools.cache
def template_text(name: str) -> str:
    """A file of ``engine/agents/templates`` as text."""
    return resources.files("engine.agents.templates").joinpath(name).read_text(encoding="utf-8")


def _render(name: str, **values: str) -> str:
    return Template(template_text(name)).substitute(**values).strip() + "\n"


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")


def clip(text: str, limit: int) -> str:
    """Keep the head and the tail of a long text, saying how much was cut."""
    text = text.strip("\n")
    if len(text) <= limit:
        return text
    head = limit // 3
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[-tail:]}"


def _code(text: str) -> str:
    return text.strip("\n")


def policy_text(
    guard_policy: str = "default", backend: Backend = "cuda", context: PromptContext | None = None
) -> str:
    """What the guard policy allows, in the Coder's terms, plus any rule the session changed."""
    check_policy(guard_policy)
    _check_backend(backend)
    text = _render(
        f"policy_{guard_policy}.md", own_code=_OWN_CODE[backend], share_sentence=_SHARE_SENTENCE[backend]
    ).strip()
    changes = guard_changes_text(context.guard) if context else ""
    return f"{text}\n{changes}" if changes else text


def target_text(backend: Backend = "cuda", context: PromptContext | None = None) -> str:
    return context.target.strip() if context and context.target.strip() else _UNKNOWN_TARGET[backend]


def standing_text(guard_policy: str, backend: Backend, context: PromptContext | None) -> str:
    """The rules a version is held to (guard policy + correctness bar), as the Judge reads them."""
    context = context or PromptContext()
    return f"{policy_text(guard_policy, backend, context)}\n\n{context.contract.text()}"


def history_section(context: PromptContext | None, role: str) -> str:
    """The earlier rounds, bounded; "" before the first round."""
    if not context or not context.history.strip():
        return ""
    advice = (
        "Do not propose again an idea that failed, made the kernel slower, or was rejected by the human,"
        " unless you say why it will work this time."
        if role == "judge"
        else "Learn from it: do not bring back a change that an earlier round showed to fail."
    )
    body = clip(context.history, MAX_HISTORY_CHARS)
    return f"\nEarlier rounds of this branch:\n{body}\n{advice}\n"


def coder_system(
    backend: Backend = "cuda", guard_policy: str = "default", context: PromptContext | None = None
) -> str:
    """The Coder's standing instructions: layout, guard policy, target hardware, correctness bar."""
    _check_backend(backend)
    context = context or PromptContext()
    return _render(
        "coder_system.md",
        language=_LANGUAGE[backend],
        target=_TARGET[backend],
        rules=template_text(f"rules_{backend}.md").strip(),
        policy=policy_text(guard_policy, backend, context),
        hardware=target_text(backend, context),
        contract=context.contract.text(),
    )


def example_kernel(backend: Backend = "cuda") -> str:
    """The worked example ``ModelNew`` for ``backend`` (also a standalone file tests can build)."""
    _check_backend(backend)
    return template_text(f"example_{backend}.py")


def coder_seed(
    reference: str,
    backend: Backend = "cuda",
    *,
    guard_policy: str = "default",
    context: PromptContext | None = None,
) -> Prompt:
    user = _render(
        "coder_seed.md",
        example_reference=_code(template_text("example_reference.py")),
        example_kernel=_code(example_kernel(backend)),
        reference=_code(reference),
    )
    return Prompt("coder", "seed", coder_system(backend, guard_policy, context), [Message("user", user)])


def _suggestion_text(suggestion: Suggestion | str) -> str:
    text = suggestion.for_coder() if isinstance(suggestion, Suggestion) else str(suggestion)
    return text.strip() or "(no details given)"


def coder_repair(
    reference: str,
    kernel: str,
    suggestion: Suggestion | str,
    backend: Backend = "cuda",
    *,
    failure: str = "",
    guard_policy: str = "default",
    context: PromptContext | None = None,
) -> Prompt:
    """``failure``: the harness's report on the kernel (build log, traceback, failing trials, guard findings)."""
    user = _render(
        "coder_repair.md",
        failure=clip(failure or "(no report captured)", MAX_LOG_CHARS),
        suggestion=_suggestion_text(suggestion),
        history_section=history_section(context, "coder"),
        reference=_code(reference),
        kernel=_code(kernel),
    )
    return Prompt("coder", "repair", coder_system(backend, guard_policy, context), [Message("user", user)])


def coder_optimize(
    reference: str,
    kernel: str,
    suggestion: Suggestion | str,
    backend: Backend = "cuda",
    timing: str | None = None,
    *,
    guard_policy: str = "default",
    context: PromptContext | None = None,
) -> Prompt:
    timing_line = f" Its timing: {timing.strip()}." if timing and timing.strip() else ""
    user = _render(
        "coder_optimize.md",
        timing_line=timing_line,
        suggestion=_suggestion_text(suggestion),
        history_section=history_section(context, "coder"),
        reference=_code(reference),
        kernel=_code(kernel),
    )
    return Prompt("coder", "optimize", coder_system(backend, guard_policy, context), [Message("user", user)])


def judge_system(backend: Backend = "cuda") -> str:
    _check_backend(backend)
    target = "CUDA kernels on an NVIDIA GPU" if backend == "cuda" else "C++ kernels on the CPU"
    return _render("judge_system.md", target=target)


def judge_repair(
    reference: str,
    kernel: str,
    error_log: str,
    backend: Backend = "cuda",
    *,
    guard_policy: str = "default",
    context: PromptContext | None = None,
) -> Prompt:
    user = _render(
        "judge_repair.md",
        error_log=clip(error_log or "(no log captured)", MAX_LOG_CHARS),
        standing=standing_text(guard_policy, backend, context),
        history_section=history_section(context, "judge"),
        reference=_code(reference),
        kernel=_code(kernel),
    )
    return Prompt("judge", "repair", judge_system(backend), [Message("user", user)])


def format_metrics(metrics: str | Mapping[str, Any] | list[Any] | None) -> str:
    """Metrics as the Judge reads them: text as given, structures as indented JSON."""
    if metrics is None:
        return ""
    if isinstance(metrics, str):
        return metrics.strip()
    return json.dumps(metrics, indent=2, ensure_ascii=False, default=str)


def judge_optimize(
    reference: str,
    kernel: str,
    gpu_spec: str,
    metrics: str | Mapping[str, Any] | list[Any] | None,
    feedback_kind: FeedbackKind = "ncu",
    backend: Backend = "cuda",
    timing: str | None = None,
    *,
    share: str = "",
    guard_policy: str = "default",
    context: PromptContext | None = None,
) -> Prompt:
    """``gpu_spec`` is a preformatted block (built elsewhere); ``feedback_kind`` says what ``metrics`` are.

    ``share``: the measured own-kernel share and the largest library kernels left (guard policy
    ``default``), so the Judge can say which one to replace next; "" when it was not measured.
    """
    if feedback_kind not in FEEDBACK_KINDS:
        raise ValueError(f"feedback_kind must be one of {FEEDBACK_KINDS}, not {feedback_kind!r}")
    body = format_metrics(metrics)
    if feedback_kind == "none" or not body:
        metrics_section = ""
    else:
        label = "Nsight Compute metrics" if feedback_kind == "ncu" else "torch.profiler summary"
        metrics_section = f"\n{label}:\n```\n{clip(body, MAX_METRICS_CHARS)}\n```\n"
    share_section = ""
    if share.strip():
        share_section = f"\nWhere the device time goes:\n```\n{clip(share, MAX_SHARE_CHARS)}\n```\n"
    user = _render(
        "judge_optimize.md",
        feedback_note=_FEEDBACK_NOTE[feedback_kind],
        gpu_spec=(gpu_spec or "(not available)").strip(),
        timing=(timing or "(not measured)").strip(),
        standing=standing_text(guard_policy, backend, context),
        history_section=history_section(context, "judge"),
        reference=_code(reference),
        kernel=_code(kernel),
        metrics_section=metrics_section,
        share_section=share_section,
    )
    return Prompt("judge", "optimize", judge_system(backend), [Message("user", user)])


def ask_for_ideas(prompt: Prompt, k: int) -> Prompt:
    """The round's Judge prompt (repair or optimize) turned into a request for ``k`` different ideas in
    one reply, ranked, each in the same JSON fields, so an exploration can give each idea its own branch
    (engine.agents.parse.parse_ideas reads the reply)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    what = "issues to fix" if prompt.kind == "repair" else "optimizations"
    ask = (
        f"\n\nThis time, give {k} different {what} instead of one, each of which could be tried on its own "
        "branch of the search. Different means another bottleneck or issue, or another technique for it; the "
        "same change with other numbers is not a different idea. Put the most promising first.\n"
        f"Reply with a JSON array of {k} objects, each with exactly the fields asked for above and a "
        '"rank" field (1 = most promising).'
    )
    messages = list(prompt.messages)
    last = messages[-1]
    messages[-1] = Message(last.role, last.content + ask)
    return dataclasses.replace(prompt, messages=messages)
