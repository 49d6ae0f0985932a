"""Coder and Judge end to end: prompt → real provider (scripted files, or the real SDK clients
against the local fake server) → parsed result and a transcript record with usage and cost."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from engine.agents import Coder, Judge
from engine.llm import ProviderSettings, make_provider
from engine.llm import errors as E

try:
    from tests.fake_llm_server import (
        CHAT,
        MESSAGES,
        FakeLLMServer,
        FakeResponse,
        chat_completion,
        error_body,
        messages_sse,
    )
except ImportError:  # pragma: no cover - tests/ on sys.path instead of the repo root
    from fake_llm_server import (  # type: ignore
        CHAT,
        MESSAGES,
        FakeLLMServer,
        FakeResponse,
        chat_completion,
        error_body,
        messages_sse,
    )

CORPUS = Path(__file__).parent / "fixtures" / "replies"
REF = "import torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x.relu()\n"
KERNEL = (CORPUS / "k01_fenced_python.md").read_text().split("```python\n")[1].split("```")[0]
SECRET = "sk-roles-secret-42"
RECORD_KEYS = {
    "role",
    "kind",
    "model",
    "provider",
    "started_at",
    "system",
    "messages",
    "reply",
    "thinking",
    "usage",
    "latency_s",
    "cost_usd",
    "stop_reason",
    "served_model",
    "request",
    "outcome",
    "error",
}


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    for var in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def server():
    with FakeLLMServer() as s:
        yield s


def scripted(tmp_path: Path, *names: str):
    for i, name in enumerate(names):
        shutil.copy(CORPUS / name, tmp_path / f"{i:02d}_{name}")
    return make_provider(f"scripted/{tmp_path}")


def test_coder_seed_with_scripted_replies_records_the_call(tmp_path):
    coder = Coder(scripted(tmp_path, "k06_think_tags.md"), backend="cpu")
    tokens: list[str] = []
    turn = coder.seed(REF, on_token=tokens.append)
    assert turn.extraction.outcome == "ok" and "FINAL_ANSWER" in turn.code
    rec = turn.record
    assert set(rec) == RECORD_KEYS
    assert (rec["role"], rec["kind"], rec["provider"], rec["outcome"]) == ("coder", "seed", "scripted", "ok")
    assert rec["system"] == turn.prompt.system and "C++" in rec["system"]
    assert rec["messages"][0]["content"] == turn.prompt.messages[0].content
    assert "DRAFT_IN_THINKING" in rec["thinking"] and rec["reply"] == turn.reply.text
    assert rec["cost_usd"] == 0.0 and rec["usage"]["input_tokens"] == 0
    assert datetime.fromisoformat(rec["started_at"]).tzinfo is not None
    assert "".join(tokens) == turn.reply.text
    json.dumps(rec)  # JSON-able as is


def test_coder_reply_without_code_is_an_outcome_not_an_error(tmp_path):
    turn = Coder(scripted(tmp_path, "k08_refusal.md")).repair(REF, KERNEL, "fix the grid")
    assert turn.extraction.outcome == "no_code" and turn.code is None
    assert turn.record["outcome"] == "no_code"
    assert "fix the grid" in turn.record["messages"][0]["content"]


def test_the_roles_ask_again_themselves_so_the_loop_builds_no_prompt(tmp_path):
    """The Coder's no-code retry and the Judge's rejected suggestions are the roles' own follow-ups:
    each continues the same prompt with the earlier reply and what to do about it."""
    coder = Coder(scripted(tmp_path, "k08_refusal.md"))
    first = coder.repair(REF, KERNEL, "fix the grid")
    again = coder.ask_for_code(first)
    roles = [m["role"] for m in again.record["messages"]]
    assert roles == ["user", "assistant", "user"] and "no usable kernel file" in again.record["messages"][2]["content"]
    judge_dir = tmp_path / "judge"
    judge_dir.mkdir()
    judge = Judge(scripted(judge_dir, "j01_repair_bare_json.txt"))
    rejected = [{"suggestion": {"raw": "use shared memory"}, "note": "we tried that in iter 2"}]
    turn = judge.repair(REF, KERNEL, "error: boom", rejections=rejected)
    messages = turn.record["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == "use shared memory" and "we tried that in iter 2" in messages[2]["content"]


def test_the_loop_reaches_the_judge_only_through_its_role() -> None:
    from tests.conftest import REPO

    machine = (REPO / "engine" / "loop" / "machine.py").read_text()
    assert "agents.prompts" not in machine and "import prompts" not in machine and "type: ignore" not in machine


def test_judge_repair_over_the_openai_client_records_usage_and_cost(server):
    body = chat_completion(
        (CORPUS / "j02_repair_fenced_with_prose.md").read_text(),
        model="o3-2025-04-16",
        prompt_tokens=3000,
        completion_tokens=800,
        reasoning_tokens=600,
    )
    server.enqueue(CHAT, FakeResponse(json_body=body))
    provider = make_provider(
        "openai/o3", ProviderSettings(base_url=server.openai_base_url, stream=False, max_retries=0)
    )
    turn = Judge(provider).repair(REF, KERNEL, "error: identifier __builtin_ia32 is undefined")

    sent = server.requests_to(CHAT)[0].body
    assert sent["model"] == "o3" and sent["max_completion_tokens"] == 16384 and "temperature" not in sent
    assert sent["messages"][0]["role"] == "system" and "Judge" in sent["messages"][0]["content"]
    assert "__builtin_ia32" in sent["messages"][1]["content"] and "ext.relu" in sent["messages"][1]["content"]

    s = turn.suggestion
    assert s.parsed and "torch/extension.h" in s.critical_issue
    rec = turn.record
    assert (rec["role"], rec["kind"], rec["model"], rec["outcome"]) == (
        "judge",
        "repair",
        "openai/o3",
        "json",
    )
    assert rec["usage"] == {
        "input_tokens": 3000,
        "output_tokens": 800,
        "reasoning_tokens": 600,
        "cached_tokens": 0,
    }
    assert rec["cost_usd"] == pytest.approx((3000 * 2.0 + 800 * 8.0) / 1e6)
    assert rec["served_model"] == "o3-2025-04-16" and rec["latency_s"] > 0
    assert SECRET not in json.dumps(rec)


def test_judge_optimize_over_the_anthropic_client_streams(server):
    reply = (CORPUS / "j06_optimize_full.md").read_text()
    chunks = [reply[i : i + 40] for i in range(0, len(reply), 40)]
    server.enqueue(
        MESSAGES,
        FakeResponse(
            sse=messages_sse(chunks, model="claude-sonnet-4-6", input_tokens=5000, output_tokens=400)
        ),
    )
    provider = make_provider(
        "anthropic/claude-sonnet-4-6", {"base_url": server.anthropic_base_url, "max_retries": 0}
    )
    tokens: list[str] = []
    turn = Judge(provider).optimize(
        REF,
        KERNEL,
        gpu_spec="GPU: H200",
        metrics={"dram": "92%"},
        feedback_kind="ncu",
        on_token=tokens.append,
    )
    assert "".join(tokens) == reply
    assert (
        turn.suggestion.bottleneck.startswith("Two separate passes") and len(turn.suggestion.key_metrics) == 3
    )
    sent = server.requests_to(MESSAGES)[0].body
    assert (
        "Nsight Compute" in sent["messages"][0]["content"] and "GPU: H200" in sent["messages"][0]["content"]
    )
    assert turn.record["cost_usd"] == pytest.approx((5000 * 3.0 + 400 * 15.0) / 1e6)
    assert turn.record["kind"] == "optimize" and SECRET not in json.dumps(turn.record)


def test_judge_without_json_still_gives_a_suggestion(tmp_path):
    turn = Judge(scripted(tmp_path, "j05_repair_no_json.md")).repair(REF, KERNEL, "mismatch")
    assert not turn.suggestion.parsed and "contiguous" in turn.suggestion.for_coder()
    assert turn.record["outcome"] == "text"


def test_failed_call_carries_a_record(server):
    server.enqueue(CHAT, FakeResponse(status=401, json_body=error_body("bad key", code="invalid_api_key")))
    provider = make_provider("openai/gpt-4o", {"base_url": server.openai_base_url, "max_retries": 0})
    with pytest.raises(E.AuthError) as info:
        Coder(provider).seed(REF)
    rec = info.value.record
    assert (rec["role"], rec["kind"], rec["reply"]) == ("coder", "seed", None)
    assert "OPENAI_API_KEY" in rec["error"] and SECRET not in json.dumps(rec)


def test_truncated_reply_is_flagged(server):
    text = (CORPUS / "k17_truncated_in_forward.md").read_text()
    server.enqueue(CHAT, FakeResponse(json_body=chat_completion(text, finish_reason="length")))
    provider = make_provider(
        "openai/gpt-4o", {"base_url": server.openai_base_url, "max_retries": 0, "stream": False}
    )
    turn = Coder(provider, max_output_tokens=1000).seed(REF)
    assert server.requests[0].body["max_tokens"] == 1000
    assert "output-token limit" in turn.extraction.note
