"""K distinct Judge ideas from one reply (engine/agents/parse.py ``parse_ideas``, ``Judge.ideas``): the
first piece of an exploration (issue 28), read as robustly as a single suggestion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.agents import prompts
from engine.agents.parse import parse_ideas, parse_suggestion
from engine.agents.roles import Judge
from engine.llm.scripted import ScriptedProvider

IDEA = {
    "key_metrics": ["dram__throughput 52%"],
    "bottleneck": "scalar loads",
    "optimization_method": "float4 vector loads",
    "modification_plan": "load four floats per thread",
}
OTHER = {**IDEA, "bottleneck": "too few blocks in flight", "optimization_method": "a larger grid"}
THIRD = {**IDEA, "bottleneck": "tail handled by every thread", "optimization_method": "a separate tail kernel"}


def test_a_json_array_gives_the_ideas_in_rank_order() -> None:
    reply = "Three options:\n```json\n" + json.dumps([
        {**OTHER, "rank": 2}, {**IDEA, "rank": 1}, {**THIRD, "rank": 3},
    ]) + "\n```"  # fmt: skip
    ideas = parse_ideas(reply, "optimize", 3)
    assert [i.bottleneck for i in ideas] == ["scalar loads", "too few blocks in flight", "tail handled by every thread"]
    assert all(i.parsed for i in ideas) and ideas[0].key_metrics == ["dram__throughput 52%"]
    assert [i.note for i in ideas] == ["idea 1 of 3", "idea 2 of 3", "idea 3 of 3"]
    assert ideas[0].extra["rank"] == 1 and "float4" in ideas[0].for_coder()


def test_wrapped_lists_separate_objects_and_python_literals_are_read_too() -> None:
    wrapped = json.dumps({"ideas": [IDEA, OTHER], "comment": "both help"})
    assert [i.bottleneck for i in parse_ideas(f"<think>hmm {{}}</think>{wrapped}", "optimize", 3)] == [
        "scalar loads", "too few blocks in flight",
    ]  # fmt: skip
    separate = f"Idea one: {json.dumps(IDEA)}\n\nIdea two: {json.dumps({'suggestion': OTHER})}"
    assert [i.bottleneck for i in parse_ideas(separate, "optimize", 3)] == ["scalar loads", "too few blocks in flight"]
    literal = "[" + repr({"critical_issue": "missing include", "minimal_fix_hint": "add it"}) + ",]"
    [idea] = parse_ideas(literal, "repair", 2)
    assert idea.critical_issue == "missing include" and idea.parsed


def test_repeats_are_dropped_and_k_caps_the_list() -> None:
    same_again = {**IDEA, "modification_plan": "the same, said differently", "bottleneck": "Scalar loads!"}
    ideas = parse_ideas(json.dumps([IDEA, same_again, OTHER, THIRD]), "optimize", 2)
    assert [i.bottleneck for i in ideas] == ["scalar loads", "too few blocks in flight"]


def test_a_reply_without_json_is_one_free_text_idea() -> None:
    [idea] = parse_ideas("Use shared memory tiling; nothing else matters.", "optimize", 3)
    assert idea == parse_suggestion("Use shared memory tiling; nothing else matters.", "optimize")
    assert not idea.parsed and "shared memory" in idea.for_coder()


def test_the_judge_asks_for_k_ranked_ideas_and_parses_the_reply(tmp_path: Path) -> None:
    """Through the real scripted provider, the same path a model's reply takes."""
    (tmp_path / "01.md").write_text("Here you go:\n" + json.dumps([IDEA, OTHER, THIRD]))
    judge = Judge(ScriptedProvider(str(tmp_path)))
    base = prompts.judge_optimize("REFERENCE", "KERNEL", "H200", "dram 52%")
    turn = judge.ideas(base, 3)
    assert [i.optimization_method for i in turn.ideas] == ["float4 vector loads", "a larger grid", "a separate tail kernel"]
    asked = turn.prompt.messages[-1].content
    assert asked.startswith(base.messages[-1].content) and "give 3 different optimizations" in asked
    assert '"rank"' in asked and turn.record["outcome"] == "json"
    with pytest.raises(ValueError):
        prompts.ask_for_ideas(base, 0)
