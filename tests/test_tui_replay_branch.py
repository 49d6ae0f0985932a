"""``b`` in replay starts a live session on the new branch, and every later commit lands there (issue 46.1).

Everything is real: the session repo (GitPython reads the branches back), the loop from
``engine.loop.factory.create_loop`` with the project's settings, and the ``openai`` client talking to
tests/fake_llm_server.py on loopback, which records what the Coder was sent. The Coder answers the
fixture's kernel, which the static guard refuses at once, so a round commits without a build.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import git
import pytest

from sessions.repo import SessionRepo
from tests.conftest import python_path
from tests.fake_llm_server import CHAT, FakeLLMServer, FakeResponse, RecordedRequest, chat_sse
from tests.test_tui_fixtures import SIZES, kernel, until
from tui.app import CudaforgeApp
from tui.screens.approval import ApprovalScreen
from tui.screens.workbench import WorkbenchScreen


def answer(request: RecordedRequest) -> FakeResponse:
    """The Judge proposes one idea; the Coder answers the fixture's kernel (refused without a build)."""
    model = str((request.body or {}).get("model", ""))
    if model == "cf-judge":
        reply = json.dumps({"key_metrics": ["speedup"], "bottleneck": "the scalar loop",
                            "optimization_method": "vectorize", "modification_plan": "use float4"})  # fmt: skip
    else:
        # a new kernel (not the fixture's versions again, which differ only in comments: a repeat is not built)
        reply = f"Here it is.\n\n```python\n{kernel(7)}REPLY = 7\n```\n"
    return FakeResponse(sse=chat_sse([reply], model=model, prompt_tokens=100, completion_tokens=50))


@pytest.fixture
def llm(tui_env: Path) -> Iterator[FakeLLMServer]:
    """A fake OpenAI server the app's config points the Coder and the Judge at (three rounds: to #3)."""
    with FakeLLMServer() as server:
        server.respond(CHAT, answer)
        (tui_env / "config.toml").write_text(
            '[models]\ncoder = "openai/cf-coder"\njudge = "openai/cf-judge"\n'
            f'[providers.openai]\nbase_url = "{server.openai_base_url}"\nmax_retries = 0\n'
            '[loop]\nrounds = 3\n[eval]\ndevice = "cpu"\n'
        )
        yield server




def coder_prompts(server: FakeLLMServer) -> list[str]:
    """The user messages of every request the Coder was sent."""
    prompts = []
    for request in server.requests_to(CHAT):
        body = request.body or {}
        if body.get("model") == "cf-coder":
            prompts.append("\n".join(str(m.get("content")) for m in body.get("messages", [])))
    return prompts


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_b_in_replay_runs_the_next_round_on_the_new_branch_with_its_history(
    session_root: Path, llm: FakeLLMServer, size: tuple[int, int]
) -> None:
    path = session_root / "relu-demo"
    main_before = git.Repo(path).commit("main").hexsha
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="replay")
    async with app.run_test(size=size) as pilot:
        await pilot.press("n", "n", "b")  # at #2 of main (main goes on to #3)
        await until(pilot, lambda: isinstance(app.screen, WorkbenchScreen) and app.screen.mode == "live")
        live = app.screen
        assert live.branch == "from-iter-2" and live.adapter.loop.branch == "from-iter-2"
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("a")
        await until(pilot, lambda: len(repo.history("from-iter-2")) == 4)
        await until(pilot, lambda: not live.adapter.busy)
    repo.close()
    store = git.Repo(path)
    assert store.commit("main").hexsha == main_before  # main is unchanged
    new = store.commit("from-iter-2")
    assert new.message.startswith("iter 3 · optimize") and new.parents[0] == store.commit("main~1")
    (prompt,) = coder_prompts(llm)
    assert "\n2 | optimize" in prompt and "\n3 | optimize" not in prompt  # the branch's history, not main's


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (.ci/run installs it)")
@pytest.mark.parametrize("size", SIZES)
def test_b_in_replay_in_a_real_terminal_commits_on_the_new_branch(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """The same, typed into ``cudaforge replay`` under tmux (tests/test_tui_journey.py's ``Terminal``)."""
    from tests.test_tui_fixtures import make_session
    from tests.test_tui_journey import Terminal

    project, sessions = tmp_path / "project", tmp_path / "sessions"
    project.mkdir()
    path = make_session(sessions)
    main_before = git.Repo(path).commit("main").hexsha
    with FakeLLMServer() as server:
        server.respond(CHAT, answer)
        (project / "cudaforge.toml").write_text(
            f'[sessions]\ndir = "{sessions}"\n'
            '[models]\ncoder = "openai/cf-coder"\njudge = "openai/cf-judge"\n'
            f'[providers.openai]\nbase_url = "{server.openai_base_url}"\nmax_retries = 0\n'
            '[loop]\nrounds = 3\n[eval]\ndevice = "cpu"\n'
        )
        env = {
            "PYTHONPATH": python_path(),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_DATA_HOME": str(tmp_path / "data"),
            "TERM": "xterm-256color",
            "CUDAFORGE_NO_ANIMATION": "1",
            "PATH": os.environ.get("PATH", ""),
            "CUDAFORGE_KEEP_SERVER_S": os.environ.get("CUDAFORGE_KEEP_SERVER_S", "0"),  # tests/conftest.py
            "HOME": os.environ.get("HOME", str(tmp_path)),
        }
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        cli = f"env -i {exports} {shlex.quote(sys.executable)} -m tui.cli"
        command = f"cd {shlex.quote(str(project))} && {cli} replay relu-demo; echo EXITED $?; sleep 60"
        term = Terminal(f"cf-replay-b-{os.getpid()}-{size[0]}", size, tmp_path / "screens.txt")
        term.start(command)
        try:
            term.wait("replay", "kernel · iter 0 (main)")
            term.keys("n", "n")
            term.wait("at #2", "kernel · iter 2 (main)")
            term.keys("b")
            term.wait("live on the branch", "kernel · iter 2 (from-iter-2)", "press s to run the Judge on #2")
            term.keys("r")
            term.wait("suggestion", "Judge suggestion", "the scalar loop")
            term.keys("a")
            term.wait("committed", "kernel · iter 3 (from-iter-2)", "finished: target #3 reached")
            term.keys("q")
            term.wait("quit", "EXITED 0")
        finally:
            term.close()
        prompts = coder_prompts(server)
    store = git.Repo(path)
    assert store.commit("main").hexsha == main_before
    assert store.commit("from-iter-2").message.startswith("iter 3 · optimize")
    with SessionRepo(path) as repo:
        assert [it.number for it in repo.history("from-iter-2")] == [0, 1, 2, 3]
    (prompt,) = prompts
    assert "\n2 | optimize" in prompt and "\n3 | optimize" not in prompt
