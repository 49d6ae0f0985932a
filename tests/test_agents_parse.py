"""Reply parsers on a corpus of realistic replies (tests/fixtures/replies) and on edge cases."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from engine.agents import Suggestion, extract_kernel, parse_suggestion, strip_thinking

CORPUS = Path(__file__).parent / "fixtures" / "replies"
EXPECTED: dict[str, dict] = json.loads((CORPUS / "expected.json").read_text())


def _read(name: str) -> str:
    return (CORPUS / name).read_bytes().decode("utf-8")  # keep CRLF as sent


def test_corpus_is_complete():
    files = {p.name for p in CORPUS.iterdir() if p.name != "expected.json"}
    assert files == set(EXPECTED)
    assert len(files) >= 20


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items() if e["kind"] == "kernel"))
def test_kernel_corpus(name):
    exp = EXPECTED[name]
    result = extract_kernel(_read(name))
    assert result.outcome == exp["outcome"], result.note
    if exp["outcome"] == "no_code":
        assert result.code is None
    else:
        assert "class ModelNew" in result.code
        if exp.get("parses", True):
            ast.parse(result.code)
    for s in exp.get("contains", []):
        assert s in result.code
    for s in exp.get("not_contains", []):
        assert s not in (result.code or "")
    if "note" in exp:
        assert exp["note"] in result.note


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items() if e["kind"] == "judge"))
def test_judge_corpus(name):
    exp = EXPECTED[name]
    raw = _read(name)
    s = parse_suggestion(raw, exp["mode"])
    assert s.mode == exp["mode"] and s.raw == raw
    assert s.parsed is exp["parsed"], s.note
    for field, fragment in exp.get("fields", {}).items():
        assert fragment in (getattr(s, field) or ""), (field, getattr(s, field))
    for fragment in exp.get("not_in_fields", []):
        assert all(fragment not in (getattr(s, f) or "") for f in s.fields_present() if f != "key_metrics")
    for key, value in exp.get("extra", {}).items():
        assert s.extra[key] == value
    if "metrics" in exp:
        assert len(s.key_metrics) == exp["metrics"]
    if "metric_contains" in exp:
        assert exp["metric_contains"] in s.key_metrics
    if "text_contains" in exp:
        assert exp["text_contains"] in s.text
        assert exp["text_contains"] in s.for_coder()  # the text itself becomes the suggestion


def test_no_json_reply_still_yields_a_suggestion_with_a_headline():
    s = parse_suggestion("The grid is too small.\nUse ceil division.", "repair")
    assert not s.parsed and s.headline() == "The grid is too small."
    assert s.for_coder() == "The grid is too small.\nUse ceil division."


def test_parse_never_raises_on_garbage():
    for junk in ["", "{", "}{", "{'a': }", '```json\n{"bottleneck": \n```', "\x00\x01", "{" * 500]:
        s = parse_suggestion(junk, "optimize")
        assert isinstance(s, Suggestion)
        k = extract_kernel(junk)
        assert k.outcome in ("ok", "no_code")


def test_json_of_the_other_mode_is_still_kept():
    s = parse_suggestion('{"bottleneck": "DRAM bound", "optimization_method": "fuse"}', "repair")
    assert s.parsed and s.bottleneck == "DRAM bound"
    assert "missing: critical_issue" in s.note


def test_unrelated_json_is_not_mistaken_for_a_suggestion():
    s = parse_suggestion('Use a config like {"threads": 256}. The real issue is the stride.', "repair")
    assert not s.parsed and "stride" in s.text


def test_best_matching_object_wins_over_nested_and_earlier_ones():
    text = (
        'Example: {"critical_issue": "old"}\nFinal: {"critical_issue": "new", "why_it_matters": "w", '
        '"minimal_fix_hint": "h"}'
    )
    assert parse_suggestion(text, "repair").critical_issue == "new"


def test_for_coder_renders_fields_and_extras():
    s = parse_suggestion(_read("j04_repair_unknown_keys.md"), "repair")
    text = s.for_coder()
    assert text.startswith("Critical issue: The output tensor")
    assert "Minimal fix hint: Allocate with torch::empty({N}, x.options())" in text
    assert "Line number: 27" in text


def test_suggestion_round_trips_through_json():
    s = parse_suggestion(_read("j09_optimize_metric_objects.md"), "optimize")
    again = Suggestion.from_dict(json.loads(json.dumps(s.to_dict())))
    assert again == s


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>a</think>b", "b"),
        ("<THINKING>\nx\n</THINKING>\n\nanswer", "answer"),
        ("reasoning without opening</think>answer", "answer"),
        ("<think>never closed\nanswer", "never closed\nanswer"),
        ("<reasoning>r</reasoning>ok", "ok"),
    ],
)
def test_strip_thinking(text, expected):
    assert strip_thinking(text) == expected


def test_last_parsing_block_wins_over_a_broken_later_one():
    good = "```python\nclass ModelNew:\n    pass  # GOOD\n```\n"
    broken = "```python\nclass ModelNew(:\n```\n"
    result = extract_kernel(good + "then\n" + broken)
    assert "GOOD" in result.code and result.outcome == "ok"


def test_only_broken_block_is_returned_with_a_note():
    result = extract_kernel("```python\nclass ModelNew(:\n    pass\n```")
    assert result.outcome == "ok" and "does not parse" in result.note
