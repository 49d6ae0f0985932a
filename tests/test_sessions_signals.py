"""A terminal's Ctrl-C or hang-up reaches the writer, never the session's git helpers.

A terminal sends SIGINT (Ctrl-C) and SIGHUP (hang-up) to its whole foreground process group.
GitPython's persistent ``git cat-file`` helpers used to be in it: the signal killed them while
cudaforge was finishing a stage, and its commit then failed with "session … has no branch
'main'" (issue #23). Here a real writer in its own process group reads a real session (starting
the helpers), the test signals the whole group as a terminal would, and the writer, which handles
the signal, must go on reading and committing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from sessions.repo import SessionRepo
from tests.conftest_sessions import REPO_ROOT, TASK_SOURCE, child_env, record_kwargs

WRITER = """
import signal, sys
from sessions.repo import SessionRepo
from tests.conftest_sessions import record_kwargs
caught = []
signal.signal(int(sys.argv[2]), lambda *a: caught.append(a[0]))  # as cudaforge does: stop cleanly
repo = SessionRepo.open(sys.argv[1])
repo.acquire_lock()
print(repo.history()[0].kernel_source.count("torch"), repo.settings()["session"]["name"], flush=True)
sys.stdin.readline()  # the test signals the group now
number = repo.record_iteration(**record_kwargs(1))
print("caught", caught, "committed", number, repo.history()[-1].kernel_source.count("torch"), flush=True)
repo.close()
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_process_group_leaves_the_git_helpers_running(tmp_path, signum) -> None:
    with SessionRepo.create(tmp_path, task_source=TASK_SOURCE, task_name="add", name="s") as repo:
        repo.record_iteration(**record_kwargs(0))
        path = repo.path
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(int(signum))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=REPO_ROOT,
        start_new_session=True,  # its own process group, like a terminal's foreground job
    )
    assert writer.stdout is not None and writer.stdin is not None
    assert writer.stdout.readline().split()[1] == "s"  # it has read blobs: the cat-file helpers run
    os.killpg(writer.pid, signum)
    writer.stdin.write("go\n")
    writer.stdin.flush()
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert f"caught [{int(signum)}] committed 1" in out
    assert "Traceback" not in err
    with SessionRepo.open(path) as repo:
        assert [it.number for it in repo.history()] == [0, 1]
