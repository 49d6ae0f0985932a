"""The guard's names live in one import-free module that the config validates against (issue 27)."""

from __future__ import annotations

import re
import subprocess
import sys

from engine.guard import runtime
from engine.guard.rules import POLICIES, RULES, RUNTIME_RULES, all_rule_ids
from tests.layout_rules import ROOT, import_graph


def test_the_runtime_table_and_the_runtime_rule_ids_are_the_same() -> None:
    table = dict(re.findall(r"^\| ([a-z0-9-]+) \| (refuse|warn) \|", runtime.__doc__ or "", re.M))
    assert table == RUNTIME_RULES


def test_static_and_runtime_ids_never_collide_and_the_policies_are_the_two_documented() -> None:
    assert not set(RULES) & set(RUNTIME_RULES)
    assert len(all_rule_ids()) == len(RULES) + len(RUNTIME_RULES)
    assert POLICIES == ("default", "strict")


def test_the_rule_names_module_imports_nothing_of_cudaforges() -> None:
    assert import_graph()["engine.guard.rules"] == set()


def test_loading_the_config_does_not_load_the_guard() -> None:
    """The TUI's first frame reads the config; the static guard (~80 ms of imports) waits for a kernel."""
    code = (
        "import sys, engine.config as c; c.validate(c.Config());"
        "print(sorted(m for m in sys.modules if m.startswith('engine.guard')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['engine.guard', 'engine.guard.rules']"
