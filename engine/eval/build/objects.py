"""Compiled objects reused across builds: one cache entry per translation unit (ARCHITECTURE.md §3, "Builds").

Why: a build directory is named by the hash of the whole ``load_inline`` call, so a Coder who edits one
kernel body gets a new directory, and torch's ninja compiles every unit there again: the C++ binding too
(g++ on ``torch/extension.h``, seconds even with the precompiled header), although it did not change.
Here every compile edge of torch's ``build.ninja`` is keyed by what decides its object, and an object
made before for the same key is put in place instead, so ninja compiles only what changed and links.

The key: the rule, its command as ninja would run it (the build directory written ``$BUILD``, the
extension's name left out unless the source names ``TORCH_EXTENSION_NAME``: no torch, CUDA or system
header does, so a torch-free CUDA unit is shared across extension names), the source's bytes, the
compilers' identity (real path, size, modification time of each compiler the command or nvcc runs),
torch's version, and the environment variables compilers read. An entry also keeps the headers the
compiler read outside the system folders (torch's, CUDA's, ``/usr``), from ninja's deps log, by
content; an entry whose headers changed since is not used. A command that names an include folder
outside those folders, the build directory and cudaforge's header store is never cached: headers there
could change without any of the above changing.

How: the build hook wraps torch's ``_run_ninja_build``. Before ninja runs, each edge with a usable entry
gets the object copied into the build directory and its edge removed from ``build.ninja`` (ninja then
treats the object as an input); after ninja, each object it compiled is stored, also when the link
failed. The cache lives in ``<cache>/objects`` and is shared by evaluations, like the build directories.
"""

from __future__ import annotations

import contextlib
import filecmp
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = 1  # in every key: a change of what a key means starts a new cache
COMPILE_RULES = ("compile", "cuda_compile")
NAME_MACRO = "TORCH_EXTENSION_NAME"
# Environment variables g++ and nvcc read that change an object without changing its command
COMPILER_ENV = (
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "GCC_EXEC_PREFIX",
    "COMPILER_PATH",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "NVCC_CCBIN",
)
INCLUDE_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter", "-include", "-imacros", "--include-path",
                 "--system-include", "-L", "--pre-include")  # fmt: skip
_NAME_FLAG = re.compile(r"\s-DTORCH_EXTENSION_NAME=\S+")
_ABS_PATH = re.compile(r"(?<![\w.$-])/[^\s,;:'\"=]+")
_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")
UNUSED_DAYS = 14  # entries not used for this long are removed when the store is tidied
MAX_ENTRIES = 4000  # beyond this many, the least recently used go first
TIDY_EVERY_S = 3600.0


@dataclass
class Edge:
    """One ``build OBJ: RULE SRC`` line of torch's ``build.ninja``."""

    line: str
    rule: str
    output: str
    source: str
    command: str = ""  # as ninja runs it
    key: str = ""
    why_not: str = ""  # why this unit is not cached ("" when it is cacheable)
    reused: bool = False
    toolchains: list[Path] = field(default_factory=list)  # the compilers' install folders (their own headers)

    def path(self, build_dir: Path) -> Path:
        """The object file (torch names objects relative to the build directory, ninja's cwd)."""
        return build_dir / self.output


@dataclass
class Plan:
    """What the cache did to one build directory before ninja ran, and what to store after."""

    build_dir: Path
    edges: list[Edge] = field(default_factory=list)
    started: float = 0.0
    log_lines: int = 0  # lines of .ninja_log before this run: the later ones are this run's
    original: str = ""  # build.ninja as torch wrote it (put back when reused objects are given up)

    def units(self) -> list[dict[str, object]]:
        """The record of each unit for the result: reused or compiled, and how long it took."""
        seconds = _ninja_seconds(self.build_dir, self.log_lines)
        rows: list[dict[str, object]] = []
        for edge in self.edges:
            row: dict[str, object] = {
                "unit": Path(edge.output).name,
                "rule": edge.rule,
                "reused": edge.reused,
                "seconds": None if edge.reused else seconds.get(edge.output),
            }
            if edge.why_not:
                row["not_cached"] = edge.why_not
            rows.append(row)
        links = [s for out, s in seconds.items() if out.endswith(".so")]
        if links:
            rows.append({"unit": "link", "rule": "link", "reused": False, "seconds": links[-1]})
        return rows


class ObjectCache:
    """Objects under ``<cache>/objects/<key[:2]>/<key>/`` (``object.o`` + ``entry.json``)."""

    def __init__(self, cache_root: Path, trusted: list[Path] | None = None) -> None:
        self.root = cache_root / "objects"
        self.header_store = cache_root / "pch"
        self._trusted = trusted

    # -- before ninja ------------------------------------------------------------------------------
    def prepare(self, build_dir: Path) -> Plan:
        """Put every reusable object in place and drop its edge from ``build.ninja``."""
        plan = Plan(build_dir=build_dir, started=time.time(), log_lines=_line_count(build_dir / ".ninja_log"))
        ninja_file = build_dir / "build.ninja"
        try:
            text = ninja_file.read_text()
        except OSError:
            return plan
        parsed = parse_ninja(text)
        if parsed is None:
            return plan
        plan.original = text
        variables, rules, edges = parsed
        for edge in edges:
            edge.command = expand(rules[edge.rule], {**variables, "in": edge.source, "out": edge.output})
            edge.key, edge.why_not = self.key(edge, build_dir)
            if edge.key and self._place(edge, build_dir):
                edge.reused = True
        plan.edges = edges
        kept = [line for line in text.splitlines() if line not in {e.line for e in edges if e.reused}]
        if len(kept) != len(text.splitlines()):
            _write_atomically(ninja_file, "\n".join(kept) + "\n")
        return plan

    def key(self, edge: Edge, build_dir: Path) -> tuple[str, str]:
        """(key, "") for a cacheable edge, ("", why not) otherwise."""
        try:
            source = Path(edge.source).read_bytes()
        except OSError as error:
            return "", f"source unreadable: {error}"
        command = edge.command.replace(edge.source, "$SRC")
        command = re.sub(rf"(?<![\w./]){re.escape(edge.output)}(?!\w)", "$OBJ", command)
        command = command.replace(str(build_dir), "$BUILD")
        compilers = _compilers(edge.command)
        # a compiler's own folder (g++'s headers, nvcc's -ccbin) is identified by the compiler's identity
        edge.toolchains = [Path(c).parent.parent for c in compilers]
        outside = self._outside_include(command, edge.toolchains)
        if outside:
            return "", f"names an include folder outside torch, CUDA and the system: {outside}"
        # The precompiled header stands in for the header it was made from (-Winvalid-pch falls back
        # to the header itself), so an object made with it and one made without it are the same object.
        command = re.sub(rf"\s-I\s*{re.escape(str(self.header_store))}/\S+|\s-Winvalid-pch\b", "", " " + command).strip()
        if NAME_MACRO.encode() not in source:
            command = _NAME_FLAG.sub("", " " + command).strip()
        payload = {
            "format": FORMAT,
            "rule": edge.rule,
            "command": command,
            "source": hashlib.sha256(source).hexdigest(),
            "tools": _tool_identities(compilers),
            "torch": _torch_identity(),
            "env": {k: os.environ.get(k) for k in COMPILER_ENV if os.environ.get(k)},
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32], ""

    def _outside_include(self, command: str, toolchains: list[Path]) -> str:
        """The first include folder the command names outside the trusted ones ("" when none)."""
        try:
            words = shlex.split(command)
        except ValueError:
            return "an unparsable command"
        for index, word in enumerate(words):
            for flag in INCLUDE_FLAGS:
                if word == flag and index + 1 < len(words):
                    value = words[index + 1]
                elif word.startswith(flag) and len(word) > len(flag) and not word.startswith(flag + "-"):
                    value = word[len(flag) :].lstrip("=")
                else:
                    continue
                if ".." in value or not (value.startswith("/") or value.startswith("$BUILD")):
                    return value
                if value.startswith("/") and not self._is_trusted(value, toolchains):
                    return value
        for path in _ABS_PATH.findall(command):
            if not self._is_trusted(path, toolchains):
                return path
        return ""

    def _trusted_roots(self) -> list[Path]:
        if self._trusted is None:
            self._trusted = trusted_roots(self.header_store)
        return self._trusted

    def _is_trusted(self, path: str, toolchains: list[Path] = ()) -> bool:  # type: ignore[assignment]
        resolved = Path(os.path.realpath(path))
        roots = [*self._trusted_roots(), *toolchains]
        return any(resolved == root or root in resolved.parents for root in roots)

    def _place(self, edge: Edge, build_dir: Path) -> bool:
        """Copy the stored object for ``edge`` into the build directory when its headers still match."""
        folder = self.root / edge.key[:2] / edge.key
        try:
            entry = json.loads((folder / "entry.json").read_text())
        except (OSError, ValueError):
            return False
        if not all(_dependency_matches(dep, build_dir) for dep in entry.get("deps", [])):
            return False
        stored, target = folder / "object.o", edge.path(build_dir)
        try:
            if not _same_object(stored, target):
                # A copy (a later compile may overwrite it) with the stored time, so that putting the same
                # object back before a repeated build leaves the library newer and ninja links nothing.
                shutil.copy2(stored, target)
            os.utime(folder / "entry.json")  # used now: kept when the store is tidied
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(edge.path(build_dir))
            return False
        return True

    def give_up_reused(self, plan: Plan) -> None:
        """Put torch's build file back and remove the reused objects, so ninja compiles them."""
        _write_atomically(plan.build_dir / "build.ninja", plan.original)
        for edge in plan.edges:
            if edge.reused:
                with contextlib.suppress(OSError):
                    os.unlink(edge.path(plan.build_dir))
                edge.reused, edge.why_not = False, "given up"
        plan.started = time.time()

    def drop_entries(self, edges: list[Edge]) -> None:
        for edge in edges:
            shutil.rmtree(self.root / edge.key[:2] / edge.key, ignore_errors=True)

    # -- after ninja -------------------------------------------------------------------------------
    def store(self, plan: Plan) -> None:
        """Keep every object ninja compiled in this run, with the headers it read."""
        built = [
            e for e in plan.edges
            if e.key and not e.reused and _fresh(e.path(plan.build_dir), plan.started)
        ]  # fmt: skip
        if not built:
            return
        deps = _ninja_deps(plan.build_dir, [e.output for e in built])
        for edge in built:
            found = deps.get(edge.output)
            if found is None and not _only_system_includes(Path(edge.source)):
                continue  # no record of what it read (nvcc without a depfile) and it may read local files
            recorded = self._dependencies(found or [], edge, plan.build_dir)
            if recorded is not None:
                self._put(edge, recorded, plan.build_dir)
        self._tidy()

    def _dependencies(self, found: list[str], edge: Edge, build_dir: Path) -> list[list[str]] | None:
        """The headers to verify on reuse (path, digest), or None when the unit must not be stored."""
        recorded: list[list[str]] = []
        for dep in (str(build_dir / d) for d in found):  # relative ones are the build directory's
            if os.path.abspath(dep) == os.path.abspath(edge.source):
                continue
            if self._is_trusted(dep, edge.toolchains):
                continue  # torch/CUDA/system headers (and the precompiled torch header): identified by the key
            digest = _file_digest(Path(dep))
            if digest is None:
                return None
            if NAME_MACRO.encode() in Path(dep).read_bytes():
                return None  # a header that reads the extension's name: the key left the name out
            where = dep.replace(str(build_dir), "$BUILD", 1) if _under(dep, build_dir) else dep
            recorded.append([where, digest])
        return recorded

    def _put(self, edge: Edge, deps: list[list[str]], build_dir: Path) -> None:
        final = self.root / edge.key[:2] / edge.key
        if (final / "entry.json").exists():
            return
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".in-", dir=final.parent))
        try:
            shutil.copy2(edge.path(build_dir), staging / "object.o")
            entry = {"deps": deps, "unit": Path(edge.output).name, "rule": edge.rule, "made": time.time()}
            (staging / "entry.json").write_text(json.dumps(entry))
            os.rename(staging, final)  # atomic; a concurrent writer of the same key wins, this one is dropped
        except OSError:
            pass
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _tidy(self) -> None:
        """Now and then: remove entries unused for two weeks, and the oldest beyond MAX_ENTRIES."""
        marker = self.root / ".tidied"
        with contextlib.suppress(OSError):
            if time.time() - marker.stat().st_mtime < TIDY_EVERY_S:
                return
        with contextlib.suppress(OSError):
            marker.touch()
        entries = []
        for entry in self.root.glob("*/*/entry.json"):
            with contextlib.suppress(OSError):
                entries.append((entry.stat().st_mtime, entry.parent))
        entries.sort(reverse=True)
        cutoff = time.time() - UNUSED_DAYS * 86400
        for rank, (used, folder) in enumerate(entries):
            if used < cutoff or rank >= MAX_ENTRIES:
                shutil.rmtree(folder, ignore_errors=True)


def build_with_objects(
    cache: ObjectCache, build_dir: Path, run: Callable[[], None], say: Callable[[str], None]
) -> Plan | None:
    """Run ninja (``run``) with every reusable object in place, then store what it compiled.

    A link that fails with reused objects in it is tried once more with those units compiled afresh
    (and their entries dropped when that works), so that a bad stored object is never the kernel's
    compile error. The cache is an optimisation: when it fails itself, ninja builds everything.
    """
    try:
        plan = cache.prepare(build_dir)
    except Exception as error:  # noqa: BLE001 - building every unit is always right
        say(f"the object cache failed ({type(error).__name__}: {error}); compiling every unit")
        run()
        return None
    for edge in plan.edges:
        if edge.reused:
            say(f"reusing {Path(edge.output).name}: compiled before from the same source, flags and headers")
    try:
        run()
    except Exception:
        cache.store(plan)
        if not _link_failed_with_reused(plan):
            raise
        say("the link failed with reused objects in it: compiling those units again")
        cache.give_up_reused(plan)
        run()
        cache.drop_entries([e for e in plan.edges if e.key and e.why_not == "given up"])
    cache.store(plan)
    return plan


def _link_failed_with_reused(plan: Plan) -> bool:
    """Every unit compiled or reused, at least one reused: the failure was the link's."""
    return any(e.reused for e in plan.edges) and all(
        e.reused or _fresh(e.path(plan.build_dir), plan.started) for e in plan.edges
    )


def trusted_roots(header_store: Path) -> list[Path]:
    """Folders whose headers are identified by the key's tool and torch identities, not by content:
    the system's, CUDA's, torch's and Python's, and cudaforge's own precompiled-header store."""
    import sysconfig

    roots = [Path("/usr"), header_store]
    with contextlib.suppress(Exception):
        import torch.utils.cpp_extension as cpp_extension

        roots.append(Path(cpp_extension.__file__).parents[1])  # the torch package (its include/ inside)
        if cpp_extension.CUDA_HOME:
            roots.append(Path(cpp_extension.CUDA_HOME))
    for name in ("include", "platinclude"):
        if sysconfig.get_paths().get(name):
            roots.append(Path(sysconfig.get_paths()[name]))
    roots.append(Path(sys.base_prefix) / "include")
    return [Path(os.path.realpath(r)) for r in roots]


def parse_ninja(text: str) -> tuple[dict[str, str], dict[str, str], list[Edge]] | None:
    """(top-level variables, rule commands, compile edges) of torch's build file; None when it is not
    the shape torch writes (then nothing is cached and ninja builds as usual)."""
    variables: dict[str, str] = {}
    rules: dict[str, str] = {}
    edges: list[Edge] = []
    rule: str | None = None
    for line in text.splitlines():
        if line.startswith("rule "):
            rule = line[5:].strip()
        elif line.startswith((" ", "\t")):
            name, _, value = line.strip().partition("=")
            if rule and name.strip() == "command":
                rules[rule] = value.strip()
        elif line.startswith("build "):
            rule = None
            match = re.match(r"build (.+?): (\w+) (.+)$", line)
            if match and match.group(2) in COMPILE_RULES:
                output, source = (_unescape(p) for p in (match.group(1), match.group(3)))
                if " " in match.group(3).replace("$ ", ""):
                    return None  # one source per edge is what torch writes
                edges.append(Edge(line=line, rule=match.group(2), output=output, source=source))
        elif "=" in line and not line.startswith("#"):
            rule = None
            name, _, value = line.partition("=")
            variables[name.strip()] = value.strip()
    if any(edge.rule not in rules for edge in edges):
        return None
    return variables, rules, edges


def expand(command: str, variables: dict[str, str]) -> str:
    """A rule's command with ninja's ``$name`` / ``${name}`` variables filled in (one level, as torch's
    build file needs); ``$$`` is a dollar."""
    return _VAR.sub(lambda m: variables.get(m.group(1) or m.group(2), ""), command.replace("$$", "\0")).replace(
        "\0", "$"
    )


def _unescape(path: str) -> str:
    return path.replace("$ ", " ").replace("$:", ":").replace("$$", "$")


def _compilers(command: str) -> list[str]:
    """The real paths of the compilers a command runs: its first word, and nvcc's host compiler
    (``-ccbin``, else the ``c++``/``gcc`` nvcc finds on PATH)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    names = words[:1]
    for index, word in enumerate(words):
        if word in ("-ccbin", "--compiler-bindir") and index + 1 < len(words):
            names.append(words[index + 1])
        elif word.startswith(("-ccbin=", "--compiler-bindir=")):
            names.append(word.split("=", 1)[1])
    if names and Path(names[0]).name.startswith("nvcc") and len(names) == 1:
        names += ["c++", "gcc"]
    found = [shutil.which(n) for n in names]
    return list(dict.fromkeys(os.path.realpath(f) for f in found if f))


def _tool_identities(compilers: list[str]) -> list[list[object]]:
    """Real path, size and modification time of each compiler (a different compiler is another key)."""
    out: list[list[object]] = []
    for real in compilers:
        with contextlib.suppress(OSError):
            stat = os.stat(real)
            out.append([real, stat.st_size, stat.st_mtime_ns])
    return out


def _torch_identity() -> list[str | None]:
    import torch

    return [torch.__version__, torch.version.cuda, os.path.realpath(torch.__file__)]


def _only_system_includes(source: Path) -> bool:
    """True when every ``#include`` of the source names a header in angle brackets (found on the
    command's include path, which a cacheable command keeps inside trusted folders)."""
    try:
        return not includes_local_header(source.read_text(errors="replace"))
    except OSError:
        return False


_LOCAL_INCLUDE = re.compile(r"^\s*#\s*include\s*[^<\s]", re.M)


def includes_local_header(text: str) -> bool:
    """Whether a source may include a header of its own: a quoted ``#include``, or one named by a macro
    (angle brackets name toolkit and system headers on the include path)."""
    return bool(_LOCAL_INCLUDE.search(text))


def _dependency_matches(dep: list[str], build_dir: Path) -> bool:
    path, digest = dep
    resolved = Path(path.replace("$BUILD", str(build_dir), 1))
    return _file_digest(resolved) == digest


def _file_digest(path: Path) -> str | None:
    """Content hash of a header (the precompiled header's store is trusted, so never a .gch here)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _same_object(stored: Path, target: Path) -> bool:
    """The build directory already holds this object (a repeated build, or the build that stored it):
    copying it again would make it newer than the library and ninja would link again."""
    try:
        return stored.stat().st_size == target.stat().st_size and filecmp.cmp(stored, target, shallow=False)
    except OSError:
        return False


def _under(path: str, folder: Path) -> bool:
    resolved = Path(os.path.realpath(path))
    root = Path(os.path.realpath(folder))
    return resolved == root or root in resolved.parents


def _fresh(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since - 1.0
    except OSError:
        return False


def _ninja_deps(build_dir: Path, outputs: list[str]) -> dict[str, list[str]]:
    """The headers ninja's deps log recorded for each output (``ninja -t deps``); an output ninja has
    no deps for is absent."""
    try:
        done = subprocess.run(
            ["ninja", "-C", str(build_dir), "-t", "deps", *outputs],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in done.stdout.splitlines():
        if not line.strip():
            current = None
        elif not line.startswith((" ", "\t")):
            name, _, rest = line.partition(": #deps")
            current = [] if rest and "(VALID)" in rest else None
            if current is not None:
                found[name] = current
        elif current is not None:
            current.append(line.strip())
    return found


def _line_count(path: Path) -> int:
    try:
        return len(path.read_text(errors="replace").splitlines())
    except OSError:
        return 0


def _ninja_seconds(build_dir: Path, skip: int) -> dict[str, float]:
    """Seconds each output took in this ninja run, from the lines ``.ninja_log`` gained after ``skip``."""
    try:
        lines = (build_dir / ".ninja_log").read_text(errors="replace").splitlines()
    except OSError:
        return {}
    seconds: dict[str, float] = {}
    for line in lines[max(skip, 1) :]:
        parts = line.split("\t")
        if len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
            seconds[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000.0
    return seconds


def _write_atomically(path: Path, text: str) -> None:
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    staging.write_text(text)
    os.replace(staging, path)
