"""Usage errors of the numeric options: one line naming the option, the rule and the value given."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, python_path
from tui.cli import build_parser, modules_for


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["run", "t.py", "--rounds", "-1"], "cudaforge run: error: --rounds must be 0 or more (got -1)"),
        (["run", "t.py", "--rounds", "two"], "cudaforge run: error: --rounds must be an integer (got 'two')"),
        (
            ["eval", "t.py", "k.py", "--trials", "0"],
            "cudaforge eval: error: --trials must be a positive integer (got 0)",
        ),
        (
            ["eval", "t.py", "k.py", "--seed", "x"],
            "cudaforge eval: error: --seed must be an integer (got 'x')",
        ),
        (
            ["eval", "t.py", "k.py", "--timeout", "-3"],
            "cudaforge eval: error: --timeout must be a positive number (got -3)",
        ),
        (
            ["explore", "s", "--width", "2", "--rounds", "1", "--max-cost", "0"],
            "cudaforge explore: error: --max-cost must be a positive number (got 0)",
        ),
        (
            ["export", "s", "--iteration", "-1", "-o", "x"],
            "cudaforge export: error: --iteration must be 0 or more (got -1)",
        ),
        (["branch", "s", "x"], "cudaforge branch: error: ITERATION must be an integer (got 'x')"),
        (
            ["profile", "m.py", "--passes", "0"],
            "cudaforge profile: error: --passes must be a positive integer (got 0)",
        ),
        (
            ["bench", "t.py", "--out", "o", "--workers", "0"],
            "cudaforge bench: error: --workers must be a positive integer (got 0)",
        ),
    ],
)
def test_a_bad_number_is_one_line_naming_the_option(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser(modules_for(argv))
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"{line} (see {line.split(':')[0]} --help)"]
    assert "usage:" not in err and "a int" not in err


def test_the_console_command_says_it_in_one_line(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "run", "relu.py", "--rounds", "-1", "--headless"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": python_path(), "PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": str(tmp_path)},
        timeout=120,
    )
    assert done.returncode == 2
    assert (
        done.stderr
        == "cudaforge run: error: --rounds must be 0 or more (got -1) (see cudaforge run --help)\n"
    )
    assert done.stdout == ""
