"""The GPU smoke: every GPU path of cudaforge once, on a bare machine, in a few minutes (issue 24).

Run it first and last whenever a GPU path changes (``bash benchmarks/device_run.sh smoke``). Each
check runs the product as a user does (the ``cudaforge`` command line in fresh processes, one shared
build cache that starts empty) and ends as one line ``PASS|FAIL <path> <seconds> s <detail>``,
appended to ``$RESULTS/smoke/smoke.jsonl`` the moment it is known, so a run cut short still tells
what it reached. The slow stock build runs beside the others from the start.

Paths: the split build of a stock-layout kernel with the precompiled header made, then used by the
next one; a stock build (``CUDAFORGE_BUILD_SPLIT=0``); check, timing and the own-kernel share; an ncu
profile; bwrap and Landlock; evalset on three pairs; one scripted loop round on CUDA.

    python benchmarks/smoke.py --out DIR
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TASKS, KERNELS = REPO / "examples" / "tasks", REPO / "examples" / "kernels"
SPLIT_PAIRS = REPO / "tests" / "fixtures" / "split"
DEMO = REPO / "tui" / "demo" / "script"
sys.path.insert(0, str(REPO))


class Smoke:
    """Runs checks and records one line each."""

    def __init__(self, out: Path, cache: Path) -> None:
        self.out = out
        self.cache = cache
        self.lines: list[dict[str, Any]] = []
        self.env = {**os.environ, "CUDAFORGE_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

    def cli(self, *args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "tui.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
            env={**self.env, **(env or {})},
        )

    def eval_json(self, task: Path, kernel: Path, *flags: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        done = self.cli("eval", str(task), str(kernel), "--device", "cuda", "--json", *flags, env=env)
        try:
            return {**json.loads(done.stdout), "_exit": done.returncode}
        except ValueError:
            return {"status": f"no JSON (exit {done.returncode})", "messages": [done.stderr[-400:]], "_exit": done.returncode}

    def check(self, name: str, run: Callable[[], str]) -> bool:
        """``run`` returns a detail on success and raises AssertionError (or anything) on failure."""
        started = time.monotonic()
        try:
            detail, passed = run(), True
        except Exception as error:  # noqa: BLE001 - every failure is one FAIL line
            detail, passed = f"{type(error).__name__}: {error}"[:600], False
        line = {"path": name, "pass": passed, "seconds": round(time.monotonic() - started, 1), "detail": detail}
        self.lines.append(line)
        with (self.out / "smoke.jsonl").open("a") as handle:
            handle.write(json.dumps(line) + "\n")
        print(f"{'PASS' if passed else 'FAIL'} {name} {line['seconds']} s {detail}", flush=True)
        return passed


def _verdict(result: dict[str, Any]) -> str:
    return f"{result.get('status')} · {(result.get('messages') or [''])[-1][:200]}"


def split_then_header(smoke: Smoke) -> str:
    first = smoke.eval_json(TASKS / "relu_large.py", KERNELS / "relu_cuda_stock.py", "--no-timing")
    paths = [(e["path"], e["pch"]) for e in first.get("build", {}).get("extensions", [])]
    assert first.get("status") == "correct", _verdict(first)
    assert paths == [("split", "queued")], f"first stock kernel built {paths}, expected split with the header queued"
    second = smoke.eval_json(SPLIT_PAIRS / "square" / "task.py", SPLIT_PAIRS / "square" / "kernel.py", "--no-timing")
    paths2 = [(e["path"], e["pch"]) for e in second.get("build", {}).get("extensions", [])]
    assert second.get("status") == "correct", _verdict(second)
    assert paths2 == [("split", "used")], f"second stock kernel built {paths2}, expected split with the header used"
    return (
        f"split {first['build']['seconds']:.1f} s (header queued), next stock kernel split "
        f"{second['build']['seconds']:.1f} s with the header"
    )


def stock_build(smoke: Smoke) -> str:
    own_cache = tempfile.mkdtemp(prefix="cudaforge-smoke-stock-")  # not to race the header of the others
    result = smoke.eval_json(
        SPLIT_PAIRS / "softmax" / "task.py",
        SPLIT_PAIRS / "softmax" / "kernel.py",
        "--no-timing",
        env={"CUDAFORGE_BUILD_SPLIT": "0", "CUDAFORGE_CACHE_DIR": own_cache},
    )
    paths = [e["path"] for e in result.get("build", {}).get("extensions", [])]
    assert result.get("status") == "correct", _verdict(result)
    assert paths == ["stock"], f"built {paths}"
    return f"stock build {result['build']['seconds']:.1f} s"


def check_time_share(smoke: Smoke) -> str:
    result = smoke.eval_json(TASKS / "relu_large.py", KERNELS / "relu_cuda.py")
    assert result.get("status") == "correct" and result["_exit"] == 0, _verdict(result)
    share = (result.get("kernel_share") or {}).get("share")
    assert result.get("speedup") and share is not None and share > 0.5, f"speedup {result.get('speedup')}, share {share}"
    peak = (result.get("memory") or {}).get("peak_reserved_bytes")
    assert peak, "no peak GPU memory recorded"
    n = result["timing"]["candidate"]["n"]
    return f"speedup {result['speedup']:.2f}x over {n} calls · own-kernel share {share:.0%} · peak {peak / 2**30:.2f} GiB"


def ncu_profile(smoke: Smoke) -> str:
    code = (
        "import json, sys; from pathlib import Path; from engine.profile.candidate import ProfileOptions, profile_candidate;"
        "r, spec = profile_candidate(Path(sys.argv[1]).read_text(), Path(sys.argv[2]).read_text(), None, ProfileOptions());"
        "print(json.dumps({'kind': r.kind, 'kernels': list(r.metrics), 'why': str(r.unavailable or '')}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(TASKS / "relu_large.py"), str(KERNELS / "relu_cuda.py")],
        capture_output=True, text=True, timeout=240, cwd=REPO, env=smoke.env,
    )  # fmt: skip
    data = json.loads(done.stdout.strip().splitlines()[-1])
    assert data["kind"] == "ncu", data["why"] or done.stderr[-400:]
    assert data["kernels"] and all("relu" in k for k in data["kernels"]), data["kernels"]
    return f"ncu metrics for {', '.join(data['kernels'])}"


def sandboxes(smoke: Smoke) -> str:
    details = []
    for mechanism in ("bwrap", "landlock"):
        result = smoke.eval_json(TASKS / "relu_large.py", KERNELS / "relu_cuda.py", "--no-timing", "--sandbox", mechanism)
        assert result.get("status") == "correct" and result.get("sandbox") == mechanism, f"{mechanism}: {_verdict(result)}"
        details.append(f"{mechanism} correct")
    return ", ".join(details)


def evalset(smoke: Smoke) -> str:
    out = smoke.out / "evalset"
    shutil.rmtree(out, ignore_errors=True)  # a rerun on the same machine judges again instead of resuming
    done = smoke.cli("evalset", str(SPLIT_PAIRS / "pairs.tsv"), "--out", str(out), "--device", "cuda", "--progress", "lines", timeout=400)
    summary = json.loads((out / "summary.json").read_text())
    counts = summary["status_counts"]
    assert done.returncode == 0 and counts == {"correct": 3}, f"exit {done.returncode}, {counts}: {done.stdout[-400:]}"
    return f"3 pairs correct · {summary['time']['this_run']['wall_seconds']:.1f} s"


def loop_round(smoke: Smoke) -> str:
    sessions = smoke.out / "sessions"
    shutil.rmtree(sessions, ignore_errors=True)  # one session: a rerun on the same machine starts anew
    done = smoke.cli(
        "run", str(TASKS / "relu_large.py"), "--headless", "--auto-approve", "--device", "cuda", "--rounds", "1",
        "--coder", f"scripted/{DEMO / 'coder'}", "--judge", f"scripted/{DEMO / 'judge'}", "--sessions-dir", str(sessions),
        timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, f"exit {done.returncode}: {(done.stdout + done.stderr)[-600:]}"
    from sessions.repo import SessionRepo

    [path] = [p for p in sessions.iterdir() if p.is_dir()]
    history = SessionRepo.open(str(path)).history()
    assert [h.number for h in history] == [0, 1], [h.number for h in history]
    return "; ".join(f"iter {h.number} {h.phase} {h.status}" for h in history)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "smoke.jsonl").unlink(missing_ok=True)
    smoke = Smoke(args.out, Path(tempfile.mkdtemp(prefix="cudaforge-smoke-cache-")))
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(1) as background:  # the minute-long stock build, alongside
        stock = background.submit(smoke.check, "stock-build", lambda: stock_build(smoke))
        for name, run in (
            ("split-build+header", split_then_header),
            ("check+time+share", check_time_share),
            ("ncu-profile", ncu_profile),
            ("bwrap+landlock", sandboxes),
            ("evalset-3-pairs", evalset),
            ("loop-round", loop_round),
        ):
            smoke.check(name, lambda run=run: run(smoke))
        stock.result()
    failed = [line["path"] for line in smoke.lines if not line["pass"]]
    print(f"smoke: {len(smoke.lines) - len(failed)}/{len(smoke.lines)} pass in {time.monotonic() - started:.0f} s"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""), flush=True)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
