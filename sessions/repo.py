"""A cudaforge session: one bare git repository, one commit per kernel version.

Layout and conventions (the contract is ARCHITECTURE.md §5; the message format is in
:mod:`sessions.message`):

* The repository is **bare** — ``<sessions root>/<name>/`` *is* the git directory. Nothing is
  checked out, so there is no work tree that a crash or a branch switch could leave out of step
  with the history. Plain git works on it directly: ``git -C SESSION log main``,
  ``git -C SESSION show main:kernel.py``, or ``git worktree add`` to browse the files.
* The **session root commit** (subject ``session · <task name>``) holds ``task.py`` and
  ``session.toml``; it is not an iteration.
* **Iterations are numbered from 0**: the seed kernel is iteration 0, and every commit is its
  first parent's number + 1. The number is the depth on its branch, so after branching from
  iteration 4 the new branch's next kernel is iteration 5 as well; an iteration is therefore
  named by (branch, number) and methods take an optional ``branch`` (default: the current one).
* Each iteration commit holds the full state: ``task.py``, ``kernel.py``, ``eval.json``,
  ``transcript.jsonl``, ``session.toml``, plus ``profile.json`` / ``suggestion.json`` when there
  is one. Everything is scrubbed of secrets (:mod:`sessions.secrets`) before it is stored.
* Branches: the default branch is ``main``; the **current branch** is the repository's ``HEAD``
  (what a resumed loop continues). :meth:`SessionRepo.branch_from` adds a branch at an
  iteration's commit (``from-iter-N``, ``from-iter-N-2`` … when taken); nothing is ever rewritten.
* One writer at a time (:mod:`sessions.lock`): the first write takes the lock and keeps it until
  :meth:`SessionRepo.close`; reads never take it. Writes are crash-safe (:mod:`sessions.gitstore`).

GitPython keeps a ``git cat-file`` process per repository object and is not thread-safe, so every
public method serializes on a per-object lock; close repositories you are done with.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import re
import secrets as _random
import shutil
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import git
from git.objects.fun import tree_entries_from_data

from sessions import gitstore, message, ranking
from sessions.errors import (
    BranchExists,
    NoSuchBranch,
    NoSuchFile,
    NoSuchIteration,
    NoSuchSession,
    SessionError,
    SessionExists,
)
from sessions.lock import LOCK_FILENAME, WriterLock
from sessions.paths import (
    MARKER_CONFIG_SECTION,
    default_sessions_root,
    is_session_dir,
    resolve_session,
    slugify,
)
from sessions.records import Iteration, IterationRecord
from sessions.secrets import Scrubber, is_secret_field_name
from sessions.tomlwrite import dumps as toml_dumps

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

DEFAULT_BRANCH = "main"
_SESSION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SessionRepo:
    """Read and write one session repository (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).resolve()
        if not is_session_dir(self.path):
            raise NoSuchSession(f"{self.path} is not a cudaforge session")
        self._git = gitstore.open_repo(self.path)
        self._mutex = threading.RLock()
        self._lock = WriterLock(self.path / LOCK_FILENAME, label=self.name)
        self._history_cache: dict[str, list[Iteration]] = {}
        # what ranks each commit (its eval.json read once: a commit never changes), by (branch, sha)
        self._measured_cache: dict[tuple[str, str], ranking.Measured] = {}
        self._tree_cache: dict[str, dict[str, str]] = {}
        self._root: gitstore.LogEntry | None = None

    # ------------------------------------------------------------------ opening and creating

    @classmethod
    def open(cls, session: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> SessionRepo:
        """Open a session by path, or by name under ``root`` (default: the sessions root)."""
        return cls(resolve_session(session, root))

    @classmethod
    def create(
        cls,
        root: str | os.PathLike[str] | None = None,
        task_path: str | os.PathLike[str] | None = None,
        *,
        task_source: str | None = None,
        task_name: str | None = None,
        name: str | None = None,
        settings: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> SessionRepo:
        """Create a session for a task and return it open for writing (the writer lock is held).

        Give the task as a file (``task_path``) or as text (``task_source`` with ``task_name``). The
        repository is built in a hidden temporary directory (``.NAME.creating-…``, ignored by
        listings) and renamed into place, so a crash never leaves a half-made session under its real
        name (at most an empty directory that listings skip).
        """
        if (task_path is None) == (task_source is None):
            raise ValueError("give exactly one of task_path and task_source")
        if task_path is not None:
            task_file = Path(task_path)
            try:
                task_source = task_file.read_text(encoding="utf-8")
            except OSError as error:
                raise SessionError(f"cannot read task {task_file}: {error.strerror}") from error
            task_name = task_name or task_file.stem
        task_name = message.one_line(task_name or "task") or "task"
        assert task_source is not None
        base = Path(root).expanduser() if root is not None else default_sessions_root()
        base.mkdir(parents=True, exist_ok=True)
        if name is not None and not _SESSION_NAME.match(name):
            raise SessionError(f"invalid session name {name!r}: use letters, digits, '.', '_' and '-'")

        scrub = Scrubber(env)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        stem = name or f"{slugify(task_name)}-{stamp}"
        temp = base / f".{stem}.creating-{os.getpid()}-{_random.token_hex(4)}"
        repo = gitstore.init_bare(temp)
        target: Path | None = None
        try:
            with repo.config_writer() as config:
                config.set_value(MARKER_CONFIG_SECTION, "format", message.FORMAT_VERSION)
                config.set_value(MARKER_CONFIG_SECTION, "task", task_name)
                # No hooks run in a session repository, whatever the user's global hooksPath says.
                config.set_value("core", "hooksPath", os.devnull)
            repo.git.symbolic_ref("HEAD", f"refs/heads/{DEFAULT_BRANCH}")
            target = _claim_name(base, stem, explicit=name is not None)
            session_toml = _session_toml(target.name, task_name, settings or {}, scrub)
            tree = gitstore.write_tree(
                repo,
                {
                    "task.py": gitstore.write_blob(repo, scrub.text(task_source).encode("utf-8")),
                    "session.toml": gitstore.write_blob(repo, session_toml.encode("utf-8")),
                },
            )
            commit = gitstore.write_commit(repo, tree, [], message.root_message(target.name, task_name))
            gitstore.update_ref(
                repo, f"refs/heads/{DEFAULT_BRANCH}", commit, None, "cudaforge: create session"
            )
        except BaseException:
            repo.close()
            shutil.rmtree(temp, ignore_errors=True)
            if target is not None:
                _remove_empty_dir(target)
            raise
        repo.close()
        try:
            os.rename(temp, target)  # target was claimed as an empty directory: rename replaces it
        except OSError as error:
            shutil.rmtree(temp, ignore_errors=True)
            _remove_empty_dir(target)
            raise SessionExists(f"session {target.name} already exists under {base}") from error
        session = cls(target)
        session.acquire_lock()
        return session

    # ------------------------------------------------------------------ lifetime and the lock

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def lock_notice(self) -> str | None:
        """Set when opening for writing took over a stale lock left by a dead writer."""
        return self._lock.notice

    def acquire_lock(self) -> str | None:
        """Become the writer (raise SessionLocked if another live process is); return a stale-lock notice."""
        with self._mutex:
            if self._lock.held:
                return None
            notice = self._lock.acquire()
            gitstore.remove_stale_git_locks(self.path)
            return notice

    def release_lock(self) -> None:
        with self._mutex:
            self._lock.release()

    def close(self) -> None:
        """Release the writer lock and GitPython's helper processes."""
        with self._mutex:
            self._lock.release()
            self._git.close()

    def __enter__(self) -> SessionRepo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ session facts

    def _root_entry(self) -> gitstore.LogEntry:
        if self._root is None:
            entries = gitstore.read_log(self._git, f"refs/heads/{DEFAULT_BRANCH}", "--max-parents=0")
            if not entries:
                entries = gitstore.read_log(self._git, "--branches", "--max-parents=0")
            if not entries:
                raise NoSuchSession(f"{self.path} has no session root commit")
            self._root = entries[-1]
        return self._root

    @property
    def root_sha(self) -> str:
        with self._mutex:
            return self._root_entry().sha

    @property
    def task_name(self) -> str:
        with self._mutex:
            entry = self._root_entry()
            return entry.trailers.get(message.T_TASK) or entry.subject.partition(" · ")[2] or self.name

    @property
    def created(self) -> dt.datetime:
        """When the session was created (the root commit's time, local timezone)."""
        with self._mutex:
            return _to_datetime(self._root_entry().timestamp)

    @property
    def task_source(self) -> str:
        with self._mutex:
            return self._read_blob_text(self._root_entry().tree, "task.py")

    def settings(self, branch: str | None = None) -> dict[str, Any]:
        """The parsed ``session.toml`` at a branch's tip (``session`` and ``settings`` tables)."""
        with self._mutex:
            tip = self._tip(branch)
            text = self._read_blob_text(self._git.commit(tip).tree.hexsha, "session.toml")
            return tomllib.loads(text)

    # ------------------------------------------------------------------ branches

    @property
    def current_branch(self) -> str:
        """The branch ``HEAD`` names: where a resumed loop records its next iteration."""
        with self._mutex:
            try:
                return self._git.head.reference.name
            except TypeError:  # detached HEAD: someone moved it by hand
                return DEFAULT_BRANCH

    def switch_branch(self, name: str) -> None:
        """Make ``name`` the current branch (moves ``HEAD`` only; nothing to check out)."""
        with self._mutex:
            self._tip(name)
            self.acquire_lock()
            self._git.git.symbolic_ref("HEAD", f"refs/heads/{name}")

    def branches(self) -> list[str]:
        """Branch names, ``main`` first, then alphabetical."""
        with self._mutex:
            names = sorted(head.name for head in self._git.heads)
            return sorted(names, key=lambda n: n != DEFAULT_BRANCH)

    def _tip(self, branch: str | None) -> str:
        name = branch or self.current_branch
        sha = gitstore.ref_sha(self._git, f"refs/heads/{name}")
        if sha is None:
            raise NoSuchBranch(f"session {self.name} has no branch {name!r}")
        return sha

    def branch_from(
        self, iteration: int, name: str | None = None, branch: str | None = None, switch: bool = False
    ) -> str:
        """Create a branch at ``iteration`` of ``branch``; return its name.

        Without ``name`` the branch is called ``from-iter-N`` (``-2``, ``-3`` … appended when taken);
        an explicit ``name`` that is taken raises BranchExists. ``switch`` also makes it current.
        """
        with self._mutex:
            target = self.iteration(iteration, branch)
            self.acquire_lock()
            if name is not None:
                self._check_branch_name(name)
                if gitstore.ref_sha(self._git, f"refs/heads/{name}") is not None:
                    raise BranchExists(f"branch {name!r} already exists in session {self.name}")
                candidates = [name]
            else:
                base = f"from-iter-{target.number}"
                candidates = [base, *(f"{base}-{k}" for k in range(2, 1000))]
            for candidate in candidates:
                if gitstore.ref_sha(self._git, f"refs/heads/{candidate}") is not None:
                    continue
                gitstore.update_ref(
                    self._git,
                    f"refs/heads/{candidate}",
                    target.sha,
                    None,
                    f"cudaforge: branch from iteration {target.number}",
                )
                if switch:
                    self._git.git.symbolic_ref("HEAD", f"refs/heads/{candidate}")
                return candidate
            raise BranchExists(f"no free branch name left for iteration {target.number}")

    def _check_branch_name(self, name: str) -> None:
        try:
            self._git.git.check_ref_format(f"refs/heads/{name}")
        except git.GitCommandError:
            raise SessionError(f"invalid branch name {name!r}") from None

    # ------------------------------------------------------------------ reading history

    def history(self, branch: str | None = None) -> list[Iteration]:
        """The iterations of a branch, oldest first (first-parent walk from its tip, no checkout)."""
        with self._mutex:
            tip = self._tip(branch)
            cached = self._history_cache.get(tip)
            if cached is None:
                entries = gitstore.read_log(self._git, tip, "--first-parent")
                cached = [self._iteration(e) for e in reversed(entries) if message.T_ITERATION in e.trailers]
                self._history_cache[tip] = cached
            return list(cached)

    def iteration(self, number: int, branch: str | None = None) -> Iteration:
        for item in self.history(branch):
            if item.number == number:
                return item
        raise NoSuchIteration(
            f"session {self.name} has no iteration {number} on branch {branch or self.current_branch!r}"
        )

    def read_file(self, iteration: int, filename: str, branch: str | None = None) -> str:
        """Any file of any iteration, as text."""
        return self.iteration(iteration, branch).read_text(filename)

    def best(self, branch: str | None = None) -> Iteration | None:
        """The branch's best correct iteration by the noise-aware rule (sessions.ranking.leader: a later
        kernel takes the lead only by beating the best beyond both timings' spread), or None."""
        correct = [it for it in self.history(branch) if it.correct]
        name = branch or self.current_branch
        best = ranking.leader(self.measured(name, it) for it in correct)
        return next(it for it in correct if it.sha == best.sha) if best is not None else None

    def measured(self, branch: str, iteration: Iteration) -> ranking.Measured:
        """``ranking.measured(branch, iteration)``, read once per commit (its eval.json never changes)."""
        key = (branch, iteration.sha)
        found = self._measured_cache.get(key)
        if found is None:
            found = self._measured_cache[key] = ranking.measured(branch, iteration)
        return found

    def session_best(self) -> tuple[Iteration, str] | None:
        """The best correct iteration of every branch together, and a branch that holds it (``main`` or the
        first by name among those that share it), by the same rule, oldest first; None without one."""
        names = sorted(self.branches(), key=lambda name: (name != "main", name))
        holder: dict[str, tuple[Iteration, str]] = {}
        for name in names:
            for it in self.history(name):
                if it.correct and it.sha not in holder:
                    holder[it.sha] = (it, name)
        in_order = sorted(holder.values(), key=lambda pair: (pair[0].timestamp, pair[0].number))
        best = ranking.leader(self.measured(name, it) for it, name in in_order)
        return holder[best.sha] if best is not None else None

    def all_iterations(self) -> list[Iteration]:
        """Every iteration commit reachable from any branch, each once, oldest first."""
        with self._mutex:
            entries = gitstore.read_log(self._git, "--branches")
            found = [self._iteration(e) for e in entries if message.T_ITERATION in e.trailers]
            return sorted(found, key=lambda it: (it.timestamp, it.number))

    def _iteration(self, entry: gitstore.LogEntry) -> Iteration:
        t = entry.trailers
        return Iteration(
            number=message.parse_int(t.get(message.T_ITERATION), -1),
            sha=entry.sha,
            tree=entry.tree,
            phase=t.get(message.T_PHASE, ""),
            status=t.get(message.T_STATUS, ""),
            speedup=message.parse_optional_float(t.get(message.T_SPEEDUP)),
            coder=_none_to_empty(t.get(message.T_CODER)),
            judge=_none_to_empty(t.get(message.T_JUDGE)),
            tokens=message.parse_int(t.get(message.T_TOKENS)),
            cost_usd=message.parse_optional_float(t.get(message.T_COST)),
            timestamp=_to_datetime(entry.timestamp),
            subject=entry.subject,
            _reader=self._read_blob_text,
            _lister=self._list_tree,
        )

    def _tree_entries(self, tree_sha: str) -> dict[str, str]:
        with self._mutex:
            entries = self._tree_cache.get(tree_sha)
            if entries is None:
                data = self._git.odb.stream(bytes.fromhex(tree_sha)).read()
                entries = {name: binsha.hex() for binsha, _mode, name in tree_entries_from_data(data)}
                self._tree_cache[tree_sha] = entries
            return entries

    def _list_tree(self, tree_sha: str) -> list[str]:
        return sorted(self._tree_entries(tree_sha))

    def _read_blob_text(self, tree_sha: str, filename: str) -> str:
        with self._mutex:
            blob_sha = self._tree_entries(tree_sha).get(filename)
            if blob_sha is None:
                raise NoSuchFile(f"no file {filename!r} in this iteration of session {self.name}")
            data = self._git.odb.stream(bytes.fromhex(blob_sha)).read()
            return data.decode("utf-8")

    # ------------------------------------------------------------------ writing

    def record_iteration(
        self,
        record: IterationRecord | None = None,
        *,
        branch: str | None = None,
        env: Mapping[str, str] | None = None,
        **fields: Any,
    ) -> int:
        """Commit one kernel version on ``branch`` (default: current) and return its iteration number.

        Pass an :class:`IterationRecord` or its fields as keywords. The commit becomes visible only
        when the branch ref moves, so a crash leaves the iteration either complete or absent.
        """
        if record is None:
            record = IterationRecord(**fields)
        elif fields:
            raise TypeError("pass either an IterationRecord or keyword fields, not both")
        phase = record.phase
        if phase not in message.PHASES:
            raise ValueError(f"phase must be one of {', '.join(message.PHASES)}, not {phase!r}")
        status = record.eval_result.get("status")
        if status not in message.STATUSES:
            raise ValueError(
                f"eval_result['status'] must be one of {', '.join(message.STATUSES)}, not {status!r}"
            )
        speedup = _finite_or_none(record.eval_result.get("speedup"))
        scrub = Scrubber(env)
        with self._mutex:
            self.acquire_lock()
            branch_name = branch or self.current_branch
            tip = self._tip(branch_name)
            parent = self._git.commit(tip)
            parent_number = message.parse_int(
                message.parse_trailer_lines(_trailer_text(parent.message)).get(message.T_ITERATION), -1
            )
            number = parent_number + 1
            parent_files = self._tree_entries(parent.tree.hexsha)
            files = self._iteration_files(record, scrub, parent_files)
            tree = gitstore.write_tree(self._git, files)
            msg = message.iteration_message(
                iteration=number,
                phase=phase,
                status=status,
                speedup=speedup,
                coder=scrub.text(record.coder),
                judge=scrub.text(record.judge),
                tokens=int(record.tokens),
                cost_usd=_finite_or_none(record.cost_usd),
                body=scrub.text(record.note),
            )
            commit = gitstore.write_commit(self._git, tree, [tip], msg)
            gitstore.update_ref(
                self._git, f"refs/heads/{branch_name}", commit, tip, f"cudaforge: iteration {number}"
            )
            return number

    def _iteration_files(
        self, record: IterationRecord, scrub: Scrubber, parent_files: Mapping[str, str]
    ) -> dict[str, str]:
        def blob(text: str) -> str:
            return gitstore.write_blob(self._git, scrub.text(text).encode("utf-8"))

        files = {"task.py": parent_files["task.py"]}
        if record.settings is not None:
            current = tomllib.loads(self._read_blob_text_by_sha(parent_files["session.toml"]))
            session_table = current.get("session", {})
            files["session.toml"] = blob(
                _session_toml(
                    session_table.get("name", self.name),
                    session_table.get("task", ""),
                    record.settings,
                    scrub,
                    session_table,
                )
            )
        else:
            files["session.toml"] = parent_files["session.toml"]
        files["kernel.py"] = blob(record.kernel_source)
        files["eval.json"] = blob(_json_text(scrub.data(record.eval_result)))
        files["transcript.jsonl"] = blob(
            "".join(
                json.dumps(scrub.data(call), ensure_ascii=False, default=str) + "\n"
                for call in record.transcript
            )
        )
        if record.profile is not None:
            files["profile.json"] = blob(_json_text(scrub.data(record.profile)))
        if record.suggestion is not None:
            files["suggestion.json"] = blob(_json_text(scrub.data(record.suggestion)))
        for filename, text in record.extra_files.items():
            if filename in files or "/" in filename or filename.startswith(".") or not filename:
                raise ValueError(f"extra file name {filename!r} is not allowed")
            files[filename] = blob(text)
        return files

    def _read_blob_text_by_sha(self, blob_sha: str) -> str:
        return self._git.odb.stream(bytes.fromhex(blob_sha)).read().decode("utf-8")


# ---------------------------------------------------------------------- helpers


def _claim_name(base: Path, stem: str, explicit: bool) -> Path:
    """Reserve ``base/stem`` (or ``stem-2`` …) by creating it empty; atomic against other creators."""
    for k in range(1, 1000):
        candidate = base / (stem if k == 1 else f"{stem}-{k}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            if explicit:
                raise SessionExists(f"session {stem} already exists under {base}") from None
    raise SessionExists(f"no free session name for {stem} under {base}")


def _remove_empty_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()


def _session_toml(
    name: str,
    task_name: str,
    settings: Mapping[str, Any],
    scrub: Scrubber,
    session_table: Mapping[str, Any] | None = None,
) -> str:
    table = dict(session_table or {})
    table.setdefault("name", name)
    table.setdefault("task", task_name)
    table.setdefault("created", dt.datetime.now().astimezone().isoformat(timespec="seconds"))
    table.setdefault("format", int(message.FORMAT_VERSION))
    table.setdefault("first_iteration", 0)
    header = "# cudaforge session settings. API keys are never stored here.\n"
    return header + toml_dumps({"session": table, "settings": _without_secrets(scrub.data(dict(settings)))})


def _without_secrets(value: Any) -> Any:
    """Drop settings fields named like credentials; keys belong in the environment, not the repo."""
    if isinstance(value, Mapping):
        return {k: _without_secrets(v) for k, v in value.items() if not is_secret_field_name(str(k))}
    return value


def _json_text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n"


def _finite_or_none(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _none_to_empty(value: str | None) -> str:
    return "" if value in (None, message.NONE_VALUE) else value


def _trailer_text(commit_message: str | bytes) -> str:
    """The last paragraph of a message we wrote ourselves: where its trailers are."""
    text = commit_message.decode("utf-8") if isinstance(commit_message, bytes) else commit_message
    paragraphs = [p for p in text.strip().split("\n\n") if p.strip()]
    return paragraphs[-1] if len(paragraphs) > 1 else ""


def _to_datetime(timestamp: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(timestamp, tz=dt.timezone.utc).astimezone()

