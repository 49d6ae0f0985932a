"""An exploration whose Judge has no price says its cost is unknown, never $0.0000 (README "Models
and configuration"): the command line, with a real OpenAI-compatible wire protocol on a local server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from engine.explore.plan import DONE
from tests.conftest import python_path
from tests.fake_llm_server import CHAT, FakeLLMServer, FakeResponse, chat_sse
from tests.test_explore import EXPLORE, seeded, seeded_template  # noqa: F401 (a fixture, found by name)


def test_an_unpriced_judge_makes_the_summary_say_cost_unknown(
    tmp_path: Path,
    ext_cache: Path,
    seeded_template: Path,  # noqa: F811
) -> None:
    session = seeded(tmp_path, seeded_template)
    session.close()
    cwd = tmp_path / "project"  # no [prices] for openai/unpriced-judge, and none in prices.toml
    cwd.mkdir()
    ideas = (EXPLORE / "judge" / "01_ideas.md").read_text()
    env = {**os.environ, "PYTHONPATH": python_path(), "OPENAI_API_KEY": "local-placeholder",
           "CUDAFORGE_CACHE_DIR": str(ext_cache), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}  # fmt: skip
    with FakeLLMServer() as server:
        server.enqueue(CHAT, FakeResponse(sse=chat_sse([ideas], prompt_tokens=900, completion_tokens=100)))
        env["OPENAI_BASE_URL"] = server.openai_base_url
        done = subprocess.run(
            [sys.executable, "-m", "tui.cli", "explore", str(session.path), "--width", "2", "--rounds", "1",
             "--device", "cpu", "--coder", f"scripted/{EXPLORE / 'coder'}",
             "--judge", "openai/unpriced-judge", "--json", str(tmp_path / "summary.json")],
            capture_output=True, text=True, cwd=cwd, env=env, timeout=600,
        )  # fmt: skip
        assert len(server.requests) == 1  # the ideas; each branch's one round is the scripted Coder's
    assert done.returncode == 0, done.stdout + done.stderr
    assert "total: 1000 tokens · cost unknown" in done.stdout
    rows = {
        line.split()[0]: line.split() for line in done.stdout.splitlines() if line.startswith("explore/0-")
    }
    assert "unknown" in rows["explore/0-1"] and not any(
        "$" in w for w in rows["explore/0-1"]
    )  # its first commit holds the unpriced ideas call
    assert "$0.0000" in rows["explore/0-2"]  # a scripted Coder's round: nothing billed
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [b["state"] for b in summary["branches"]] == [DONE, DONE]
    assert [b["cost_usd"] for b in summary["branches"]] == [None, 0.0]
    assert summary["cost_usd"] is None
