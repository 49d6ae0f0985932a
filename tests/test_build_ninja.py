"""engine.eval.build.ninja: the build's output is both shown and kept, with real ninja in a real folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.build.ninja import ninja_jobs, run_ninja_teed

BUILD = """rule say
  command = echo $msg && touch $out
rule fail
  command = echo "unit.cu(3): error: class uint3 has no member q" && false
build a.o: say
  msg = compiled-a
{extra}
"""


def test_each_line_is_echoed_as_it_comes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "build.ninja").write_text(BUILD.format(extra=""))
    run_ninja_teed(str(tmp_path), "Error building extension 'x'")
    assert "compiled-a" in capsys.readouterr().out and (tmp_path / "a.o").exists()


def test_a_failure_raises_torchs_form_with_the_output_in_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "build.ninja").write_text(BUILD.format(extra="build b.o: fail"))
    with pytest.raises(RuntimeError) as raised:
        run_ninja_teed(str(tmp_path), "Error building extension 'x'")
    message = str(raised.value)
    assert message.startswith("Error building extension 'x': ")
    assert "class uint3 has no member q" in message  # kept for the failure's reading
    assert "class uint3 has no member q" in capsys.readouterr().out  # and shown


@pytest.mark.parametrize(("value", "jobs"), [("3", 3), ("auto", None), ("", None), (None, None)])
def test_max_jobs_sets_ninjas_workers_by_torchs_rule(monkeypatch: pytest.MonkeyPatch, value: str | None, jobs: int | None) -> None:
    if value is None:
        monkeypatch.delenv("MAX_JOBS", raising=False)
    else:
        monkeypatch.setenv("MAX_JOBS", value)
    assert ninja_jobs() == jobs
