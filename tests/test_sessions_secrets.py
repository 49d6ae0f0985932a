"""Secrets never reach a session's history: the scrubber, and a planted key end to end."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sessions.repo import SessionRepo
from sessions.secrets import REDACTED, Scrubber, is_secret_env_name, scrub_data, scrub_text, secret_env_values
from tests.conftest_sessions import TASK_SOURCE, git, kernel

OPENAI_KEY = "sk-proj-Q7vB2nLx9TfR4mKp8WzYc3Hd6JsA1eUg"
ANTHROPIC_KEY = "sk-ant-api03-Zx8Kq2Lm5Np7Rt9Vb4Cd6Fg1Hj3Wy0Ae-QsTuVwXy"
# A value with no recognisable shape: only its variable's name marks it as secret.
CUSTOM_TOKEN = "plain-looking-value-42"


def test_env_names_that_count_as_secret() -> None:
    for name in (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "MISTRAL_API_KEY",
        "HF_TOKEN",
        "GITHUB_TOKEN",
        "CLIENT_SECRET",
        "db_password",
    ):
        assert is_secret_env_name(name), name
    for name in ("PATH", "HOME", "OPENAI_BASE_URL", "TOKENIZERS_PARALLELISM", "MAX_TOKENS"):
        assert not is_secret_env_name(name), name
    env = {"MY_API_KEY": "abcdefgh", "SHORT_TOKEN": "1234567", "PATH": "/usr/bin:/bin:/usr/local/bin"}
    assert secret_env_values(env) == {"MY_API_KEY": "abcdefgh"}


def test_env_values_are_scrubbed_by_name() -> None:
    env = {"OPENAI_API_KEY": OPENAI_KEY, "SERVICE_TOKEN": CUSTOM_TOKEN, "FLAG_SECRET": "1", "PATH": "/bin"}
    text = f"key={OPENAI_KEY} token {CUSTOM_TOKEN} flag=1 path=/bin"
    assert scrub_text(text, env) == (
        "key=[REDACTED:OPENAI_API_KEY] token [REDACTED:SERVICE_TOKEN] flag=1 path=/bin"
    )


@pytest.mark.parametrize(
    "secret",
    [
        OPENAI_KEY,
        "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2",
        ANTHROPIC_KEY,
        "ghp_" + "a" * 36,
        "github_pat_" + "B" * 40,
        "hf_" + "c" * 34,
        "AKIAIOSFODNN7EXAMPLE",
        "AIza" + "d" * 35,
        "xoxb-123456789012-abcdefghij",
    ],
)
def test_key_shaped_strings_are_scrubbed_without_any_env(secret: str) -> None:
    for text in (secret, f"error: invalid key {secret}.", f'{{"k": "{secret}"}}', f"line\\n{secret}"):
        cleaned = scrub_text(text, env={})
        assert secret not in cleaned
        assert "[REDACTED:" in cleaned


def test_a_private_key_block_is_scrubbed_whole_or_cut_off_and_in_json() -> None:
    """Seen with the sandbox off: a candidate that read ~/.ssh/id_ed25519 printed it, unredacted."""
    body = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACD"
    block = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----"
    for text in (f"leaked: {block} after", block[:60] + "\nQyNTUx", json.dumps({"log": block})):
        cleaned = scrub_text(text, env={})
        assert "b3BlbnNzaC1rZXkt" not in cleaned and "[REDACTED:private-key]" in cleaned, cleaned
    assert scrub_text(f"leaked: {block} after", env={}).endswith(" after")


def test_credential_headers_are_scrubbed() -> None:
    text = "Authorization: Bearer abc.def.ghi-123456\nx-api-key: zzzzzzzzzzzz\nContent-Type: json"
    cleaned = scrub_text(text, env={})
    assert cleaned == f"Authorization: Bearer {REDACTED}\nx-api-key: {REDACTED}\nContent-Type: json"


def test_ordinary_code_and_text_survive() -> None:
    text = (
        kernel(3) + "\n# task-specific risk-assessment-of-the-kernel-launches, mask-width 16, tokens: 1234\n"
    )
    assert scrub_text(text, env={"SOME_TOKEN": "short"}) == text


def test_json_data_is_scrubbed_by_field_name_and_value() -> None:
    data = {
        "headers": {"Authorization": "Bearer whatever", "X-Api-Key": "k", "Accept": "json"},
        "api_key": "anything-at-all",
        "usage": {"input_tokens": 10, "max_tokens": 100},
        "messages": [{"content": f"my key is {OPENAI_KEY}"}],
        "count": 3,
    }
    cleaned = Scrubber(env={}).data(data)
    assert cleaned == {
        "headers": {"Authorization": REDACTED, "X-Api-Key": REDACTED, "Accept": "json"},
        "api_key": REDACTED,
        "usage": {"input_tokens": 10, "max_tokens": 100},
        "messages": [{"content": "my key is [REDACTED:openai-key]"}],
        "count": 3,
    }
    assert data["api_key"] == "anything-at-all"  # the caller's object is not modified
    assert scrub_data(["x", 1, None], env={}) == ["x", 1, None]


def test_a_planted_key_never_reaches_the_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("MY_SERVICE_TOKEN", CUSTOM_TOKEN)
    planted = f"{OPENAI_KEY} {ANTHROPIC_KEY} {CUSTOM_TOKEN}"
    repo = SessionRepo.create(
        tmp_path,
        task_source=TASK_SOURCE + f"# {planted}\n",
        task_name="add",
        settings={
            "coder": "openai/o3",
            "api_key": OPENAI_KEY,
            "judge": {"model": "x", "token": CUSTOM_TOKEN},
            "note": planted,
        },
    )
    with repo:
        repo.record_iteration(
            kernel_source=kernel(0) + f"# debugging: {planted}\n",
            eval_result={"status": "compile_error", "speedup": None, "log": f"env dump: {planted}"},
            phase="seed",
            transcript=[
                {
                    "role": "coder",
                    "model": "openai/o3",
                    "request": {"headers": {"Authorization": f"Bearer {OPENAI_KEY}"}},
                    "messages": [{"role": "user", "content": f"use {ANTHROPIC_KEY}\nand\n{CUSTOM_TOKEN}"}],
                    "reply": f"sure: {planted}",
                }
            ],
            coder=f"openai/o3 {OPENAI_KEY}",
            note=f"note {planted}",
        )
        repo.record_iteration(
            kernel_source=kernel(1),
            eval_result={"status": "correct", "speedup": 1.3},
            suggestion={"proposed": planted, "approved": planted, "by": "judge"},
            profile={"raw": planted},
            settings={"coder": "openai/o3", "openai_api_key": OPENAI_KEY},
            extra_files={"build.log": f"nvcc ... {planted}"},
        )
        path = repo.path
        assert "[REDACTED:OPENAI_API_KEY]" in repo.read_file(0, "kernel.py")
        assert repo.history()[0].transcript[0]["request"]["headers"]["Authorization"] == REDACTED

    # every object in the repository, reachable or not, plus the refs and config
    everything = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"], cwd=path, capture_output=True, check=True
    ).stdout
    assert len(everything) > 2000
    log = git(path, "log", "-p", "--all", "--format=%B")
    files = b"".join(p.read_bytes() for p in path.rglob("*") if p.is_file())
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, CUSTOM_TOKEN):
        assert secret.encode() not in everything
        assert secret not in log
        assert secret.encode() not in files
    assert "openai_api_key" not in git(path, "show", "main:session.toml")
