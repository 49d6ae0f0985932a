"""Which write right does CUDA's start-up need under cudaforge's Landlock rules? (run on a GPU machine).

On the H200 a worker confined by Landlock failed its first CUDA call (``cuInit`` 304), and CUDA started
once writing ``/proc`` (or ``/``) was allowed. This narrows that down, in one run:

1. **trace**: an ``LD_PRELOAD`` shim (compiled here with the system C compiler) logs every ``open``
   with write intent, and its result, made by the driver's start-up (``cuInit`` + a device count via
   ctypes; no torch), unconfined and under our rules: the paths it writes and the ones refused.
2. **variants**: the same start-up in fresh processes under our rules widened by one folder each
   (``/proc``, the process's own ``/proc/self``, ``/proc/self/task``, ``/proc/driver`` …), so the
   narrowest right that works can be named.

    python benchmarks/landlock_cuda.py     # one line per variant, then the traced writes; JSON to $OUT
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.sandbox import landlock, prepare  # noqa: E402
from engine.sandbox.cudaprobe import PROBE_CODE  # noqa: E402

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void note(const char *how, const char *path, int flags, int rc, int err) {
    char line[1200];
    int n = snprintf(line, sizeof line, "LLTRACE %s %s flags=%#x rc=%d errno=%d\n", how, path ? path : "?", flags, rc, err);
    if (n > 0) { ssize_t w = write(2, line, (size_t)n); (void)w; }
}
#define WRITES(f) (((f) & O_ACCMODE) != O_RDONLY || ((f) & (O_CREAT | O_TRUNC)))
typedef int (*open_t)(const char *, int, ...);
typedef int (*openat_t)(int, const char *, int, ...);
typedef FILE *(*fopen_t)(const char *, const char *);
#define OPEN_WRAP(name) \
int name(const char *p, int f, ...) { mode_t m = 0; if (f & O_CREAT) { va_list a; va_start(a, f); m = va_arg(a, int); va_end(a); } \
  static open_t real; if (!real) real = (open_t)dlsym(RTLD_NEXT, #name); int rc = real(p, f, m); int e = errno; \
  if (WRITES(f)) note(#name, p, f, rc, rc < 0 ? e : 0); errno = e; return rc; }
#define OPENAT_WRAP(name) \
int name(int d, const char *p, int f, ...) { mode_t m = 0; if (f & O_CREAT) { va_list a; va_start(a, f); m = va_arg(a, int); va_end(a); } \
  static openat_t real; if (!real) real = (openat_t)dlsym(RTLD_NEXT, #name); int rc = real(d, p, f, m); int e = errno; \
  if (WRITES(f)) note(#name, p, f, rc, rc < 0 ? e : 0); errno = e; return rc; }
#define FOPEN_WRAP(name) \
FILE *name(const char *p, const char *mode) { static fopen_t real; if (!real) real = (fopen_t)dlsym(RTLD_NEXT, #name); \
  FILE *rc = real(p, mode); int e = errno; if (strpbrk(mode, "wa+")) note(#name, p, 0, rc ? 0 : -1, rc ? 0 : e); errno = e; return rc; }
OPEN_WRAP(open) OPEN_WRAP(open64) OPENAT_WRAP(openat) OPENAT_WRAP(openat64)
FOPEN_WRAP(fopen) FOPEN_WRAP(fopen64)
"""


def build_shim(work: Path) -> Path | None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        return None
    source, library = work / "lltrace.c", work / "lltrace.so"
    source.write_text(SHIM)
    done = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-o", str(library), str(source), "-ldl"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(f"shim build failed: {done.stderr[-400:]}", flush=True)
        return None
    return library


def probe(env: dict[str, str]) -> tuple[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE_CODE], env=env, capture_output=True, text=True, timeout=120, cwd="/"
    )
    trace = [line[len("LLTRACE ") :] for line in done.stderr.splitlines() if line.startswith("LLTRACE ")]
    answer = done.stdout.strip() or f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
    return answer, trace


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="cudaforge-llcuda-"))
    launch = prepare("landlock", ["true"], job_dir=work / "job", writable=[work / "cache"])
    rules = json.loads(launch.env[landlock.LANDLOCK_ENV])
    home = os.environ.get("HOME", "/root")
    widen = {
        "ours": ([], []),
        "write /proc": ([], ["/proc"]),
        "write /proc/self": ([], ["/proc/self"]),
        "write /proc/thread-self": ([], ["/proc/thread-self"]),
        "write /proc/self/task": ([], ["/proc/self/task"]),
        "write /proc/driver": ([], ["/proc/driver"]),
        "write /proc/sys": ([], ["/proc/sys"]),
        "write /dev/shm": ([], ["/dev/shm"]),
        "write /tmp": ([], ["/tmp"]),
        "write home": ([], [home]),
        "write /": ([], ["/"]),
    }
    rows: dict[str, object] = {"abi": landlock.abi_version(), "rules": rules}
    unconfined = dict(launch.env)
    unconfined.pop(landlock.LANDLOCK_ENV)
    variants = [("unconfined", unconfined)] + [
        (
            n,
            {
                **launch.env,
                landlock.LANDLOCK_ENV: json.dumps({"read": rules["read"] + r, "write": rules["write"] + w}),
            },
        )
        for n, (r, w) in widen.items()
    ]
    for name, env in variants:
        rows[name], _ = probe(env)
        print(f"{name:24} {rows[name]}", flush=True)
    shim = build_shim(work)
    if shim is not None:
        for name, env in variants[:2]:
            answer, trace = probe({**env, "LD_PRELOAD": str(shim)})
            rows[f"trace {name}"] = {"answer": answer, "writes": trace}
            print(f"-- traced writes, {name} ({answer}):", flush=True)
            for line in trace[:60]:
                print(f"   {line}", flush=True)
    out = os.environ.get("OUT")
    if out:
        Path(out, "landlock_cuda.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
