"""benchmarks/device_run.sh: the one documented script for every GPU run (its sections, its errors)."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "device_run.sh"


def documented_sections() -> list[str]:
    header = SCRIPT.read_text().split("set -uo pipefail", 1)[0]
    block = header.split("# Sections:", 1)[1]
    return re.findall(r"^#\s{3}(\w+)\s", block, re.M)


def test_every_documented_section_exists_and_every_section_is_documented() -> None:
    defined = re.findall(r"^section_(\w+)\(\)", SCRIPT.read_text(), re.M)
    assert documented_sections() and sorted(documented_sections()) == sorted(defined)


def test_bad_calls_exit_2_before_touching_the_machine(tmp_path) -> None:
    env = {"PATH": "/usr/bin:/bin", "RESULTS": str(tmp_path / "results"), "HOME": str(tmp_path)}
    for args in ([], ["tests", "no-such-section"]):
        done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=REPO)
        assert done.returncode == 2 and ("usage" in done.stderr or "unknown section" in done.stderr)
    assert not (tmp_path / "results").exists()
