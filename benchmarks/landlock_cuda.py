"""Which part of cudaforge's Landlock rules stops CUDA from starting? (run on a GPU machine; issue 15).

On the H200 a worker confined by Landlock failed its first CUDA call. This runs the driver's
start-up (``cuInit`` + device count, via ctypes; no torch) in fresh processes under our rules and
under widened variants, so the missing right can be named:

    python benchmarks/landlock_cuda.py            # one line per variant: cuInit rc, count rc, devices
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.sandbox import landlock, prepare  # noqa: E402
from engine.sandbox.cudaprobe import PROBE_CODE  # noqa: E402


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="cudaforge-llcuda-"))
    launch = prepare("landlock", ["true"], job_dir=work / "job", writable=[work / "cache"])
    rules = json.loads(launch.env[landlock.LANDLOCK_ENV])
    home = os.environ.get("HOME", "/root")
    widen = {
        "ours": ([], []),
        "read /": (["/"], []),
        "write /": ([], ["/"]),
        "write /tmp": ([], ["/tmp"]),
        "write /run": ([], ["/run"]),
        "write /var": ([], ["/var"]),
        "write /proc": ([], ["/proc"]),
        "write /sys": ([], ["/sys"]),
        "write home": ([], [home]),
        "read+write home": ([home], [home]),
        "read+write /": (["/"], ["/"]),
    }
    rows = {"abi": landlock.abi_version()}
    unconfined = dict(launch.env)
    unconfined.pop(landlock.LANDLOCK_ENV)
    for name, env in [("unconfined", unconfined)] + [
        (
            n,
            {
                **launch.env,
                landlock.LANDLOCK_ENV: json.dumps({"read": rules["read"] + r, "write": rules["write"] + w}),
            },
        )
        for n, (r, w) in widen.items()
    ]:
        done = subprocess.run(
            [sys.executable, "-c", PROBE_CODE], env=env, capture_output=True, text=True, timeout=120
        )
        rows[name] = done.stdout.strip() or f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
        print(f"{name:16} {rows[name]}", flush=True)
    out = os.environ.get("OUT")
    if out:
        Path(out, "landlock_cuda.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
