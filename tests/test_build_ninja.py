"""engine.eval.build.ninja: the build's output is both shown and kept, with real ninja in a real folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.eval.build.ninja import STOPPED_NOTE, ninja_jobs, run_ninja_teed
from tests.conftest import until

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


# A unit still compiling (it writes its shell's pid, then works for a minute) beside one that fails once the
# other has started, printing two lines of error as a compiler does.
RACE = """rule slow
  command = echo $$$$ > slow.pid && sleep 60 && touch $out
rule fail
  command = while [ ! -f slow.pid ]; do sleep 0.05; done; echo "unit.cu(3): error: class uint3 has no member q"; echo "1 error detected"; false
build slow.o: slow
build bad.o: fail
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()


def test_the_first_failed_unit_ends_the_build_without_waiting_for_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MAX_JOBS", "4")  # both units at once, as on any machine
    (tmp_path / "build.ninja").write_text(RACE)
    with pytest.raises(RuntimeError) as raised:
        run_ninja_teed(str(tmp_path), "Error building extension 'x'")
    message = str(raised.value)
    # the failed unit's whole output is kept, then the note that the rest was stopped
    assert "class uint3 has no member q" in message and "1 error detected" in message
    assert message.index("1 error detected") < message.index(STOPPED_NOTE.strip())
    assert STOPPED_NOTE.strip() in capsys.readouterr().out
    slow = int((tmp_path / "slow.pid").read_text())
    assert until(lambda: not _alive(slow), 30), "the unit still compiling was left running"
    assert not (tmp_path / "slow.o").exists()  # it never finished: stopped, not waited for


@pytest.mark.parametrize(("value", "jobs"), [("3", 3), ("auto", None), ("", None), (None, None)])
def test_max_jobs_sets_ninjas_workers_by_torchs_rule(monkeypatch: pytest.MonkeyPatch, value: str | None, jobs: int | None) -> None:
    if value is None:
        monkeypatch.delenv("MAX_JOBS", raising=False)
    else:
        monkeypatch.setenv("MAX_JOBS", value)
    assert ninja_jobs() == jobs
