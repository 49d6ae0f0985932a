"""The headless run's ``judge:`` line says what the Judge suggested, in the round's own mode."""

from __future__ import annotations

import io

from engine.agents.parse import parse_suggestion
from engine.cli.run import Printer
from engine.events import SuggestionReady


def judge_line(reply: str, mode: str) -> str:
    out = io.StringIO()
    suggestion = parse_suggestion(reply, mode).to_dict()  # as the loop records it (suggestion.json)
    Printer(out)(SuggestionReady(iteration=2, suggestion=suggestion))
    return out.getvalue().strip()


def test_an_optimize_reply_is_named_by_its_bottleneck_not_a_repair_placeholder() -> None:
    reply = (
        '{"critical_issue": "none found", "key_metrics": ["dram 91%"], "bottleneck": "DRAM bandwidth bound",'
        ' "optimization_method": "vectorised float4 loads", "modification_plan": "load 4 floats per thread"}'
    )
    assert judge_line(reply, "optimize") == "iter 2 ·   judge: DRAM bandwidth bound"


def test_an_optimize_reply_without_a_bottleneck_names_its_method() -> None:
    reply = '{"critical_issue": "none found", "optimization_method": "fuse the two passes"}'
    assert judge_line(reply, "optimize") == "iter 2 ·   judge: optimization method: fuse the two passes"


def test_a_reply_with_no_suggestion_of_its_mode_says_so() -> None:
    reply = '{"critical_issue": "none found"}'
    line = judge_line(reply, "optimize")
    assert (
        line
        == "iter 2 ·   judge: (no optimize suggestion: the Judge's reply gave only critical issue 'none found')"
    )


def test_a_repair_reply_and_free_text_are_shown_as_given() -> None:
    assert judge_line('{"critical_issue": "missing bounds check"}', "repair").endswith(
        "judge: missing bounds check"
    )
    assert judge_line("Use shared memory tiles.\nMore text.", "optimize").endswith(
        "judge: Use shared memory tiles."
    )
