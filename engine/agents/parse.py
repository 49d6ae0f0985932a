"""Parsers for real LLM replies: the Coder's kernel and the Judge's JSON.

Models wrap answers in many ways — fenced or bare code, several blocks (drafts, a CUDA listing
next to the Python file), JSON in a fence or inside prose, thinking blocks before the answer,
replies cut off at the token limit. These parsers take what is usable and never raise: a reply
with no kernel is a ``no_code`` outcome the loop can send back for repair, and a Judge reply with
no JSON still becomes a ``Suggestion`` carrying its text.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Literal

from engine.agents.suggestion import OPTIMIZE_FIELDS, REPAIR_FIELDS, Mode, Suggestion

_THINK_TAGS = "think|thinking|reasoning"
_THINK_BLOCK = re.compile(rf"<({_THINK_TAGS})>.*?</\1>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(rf"</({_THINK_TAGS})>", re.IGNORECASE)
_THINK_OPEN = re.compile(rf"<({_THINK_TAGS})>", re.IGNORECASE)
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^`\n]*$")
_MODEL_NEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.MULTILINE)
_IMPORT = re.compile(r"^(import|from)\s+[\w.]+")


def strip_thinking(text: str) -> str:
    """Remove ``<think>``/``<thinking>`` blocks. A lone closing tag (servers that drop the opening
    one) discards everything before it; a lone opening tag is dropped and the rest kept, since
    the answer may follow an unterminated thought."""
    text = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    return _THINK_OPEN.sub("", text).strip()


@dataclass(frozen=True)
class CodeBlock:
    lang: str
    code: str
    closed: bool


def fenced_blocks(text: str) -> list[CodeBlock]:
    """Markdown fenced blocks (``` or ~~~), in order; an unclosed last block runs to the end."""
    lines = text.splitlines()
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence = m.group(1)
        body: list[str] = []
        j, closed = i + 1, False
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                closed = True
                break
            body.append(lines[j])
            j += 1
        # dedent: fences nested in a Markdown list indent the whole block
        blocks.append(CodeBlock(m.group(2).lower(), textwrap.dedent("\n".join(body)), closed))
        i = j + 1
    return blocks


def _syntax_error(code: str) -> str | None:
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except ValueError as exc:  # e.g. null bytes
        return str(exc)
    return None


# --- kernels ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelExtraction:
    code: str | None
    outcome: Literal["ok", "no_code"]
    note: str = ""


def _bare_code(text: str) -> str | None:
    """Unfenced code: from the first import before ``class ModelNew`` to the longest prefix that
    parses, which drops trailing prose."""
    lines = text.splitlines()
    cls = next((i for i, line in enumerate(lines) if _MODEL_NEW.match(line)), None)
    if cls is None:
        return None
    starts = [i for i in range(cls) if _IMPORT.match(lines[i])][:1] + [cls]
    for start in starts:
        for end in range(len(lines), cls, -1):
            chunk = "\n".join(lines[start:end]).strip()
            if _syntax_error(chunk) is None:
                return chunk + "\n"
    return None


def extract_kernel(reply_text: str) -> KernelExtraction:
    """Find the ``ModelNew`` file in a Coder reply.

    Among fenced blocks defining ``ModelNew``, the last one that parses wins (final answers come
    after drafts); failing that, the last one defining it (a syntax error is then the build's
    to report, and the Judge's to repair).
    """
    text = strip_thinking(reply_text or "")
    if not text:
        return KernelExtraction(None, "no_code", "the reply is empty")
    blocks = fenced_blocks(text)
    candidates = [b for b in blocks if _MODEL_NEW.search(b.code)]
    if candidates:
        parsing = [b for b in candidates if _syntax_error(b.code) is None]
        chosen = (parsing or candidates)[-1]
        notes = []
        if len(blocks) > 1:
            notes.append(f"{len(blocks)} code blocks; took the one defining ModelNew")
        if not chosen.closed:
            notes.append("the code block is not closed (reply cut off?)")
        error = _syntax_error(chosen.code)
        if error:
            notes.append(f"the code does not parse: {error}")
        return KernelExtraction(chosen.code.strip("\n") + "\n", "ok", "; ".join(notes))
    bare = _bare_code(text)
    if bare is not None:
        return KernelExtraction(bare, "ok", "the code was not fenced")
    if blocks:
        note = f"{len(blocks)} code block(s) but none defines class ModelNew"
        if not blocks[-1].closed:
            note += "; the last block is not closed (reply cut off?)"
        return KernelExtraction(None, "no_code", note)
    return KernelExtraction(None, "no_code", "no code defining class ModelNew in the reply")


# --- Judge JSON -----------------------------------------------------------------------------------

_ALIASES = {
    "issue": "critical_issue",
    "critical_error": "critical_issue",
    "problem": "critical_issue",
    "error": "critical_issue",
    "root_cause": "critical_issue",
    "why": "why_it_matters",
    "reason": "why_it_matters",
    "impact": "why_it_matters",
    "explanation": "why_it_matters",
    "fix": "minimal_fix_hint",
    "fix_hint": "minimal_fix_hint",
    "minimal_fix": "minimal_fix_hint",
    "hint": "minimal_fix_hint",
    "suggested_fix": "minimal_fix_hint",
    "metrics": "key_metrics",
    "key_metric": "key_metrics",
    "important_metrics": "key_metrics",
    "main_bottleneck": "bottleneck",
    "primary_bottleneck": "bottleneck",
    "method": "optimization_method",
    "optimization": "optimization_method",
    "technique": "optimization_method",
    "plan": "modification_plan",
    "modifications": "modification_plan",
    "implementation_plan": "modification_plan",
    "steps": "modification_plan",
}
_KNOWN = set(REPAIR_FIELDS + OPTIMIZE_FIELDS)


def _norm_key(key: str) -> str:
    k = re.sub(r"[\s\-]+", "_", str(key).strip().lower()).replace("optimisation", "optimization")
    return _ALIASES.get(k, k)


def _balanced_spans(text: str) -> list[str]:
    """Top-level ``{...}`` spans, skipping braces inside quoted strings."""
    spans: list[str] = []
    depth, start, quote, escape = 0, -1, "", False
    for i, ch in enumerate(text):
        if quote:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'" and depth > 0:
            quote = ch
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def _load_object(candidate: str) -> dict[str, Any] | None:
    """Strict JSON, then JSON without trailing commas, then a Python literal (single quotes, None)."""
    attempts = (
        lambda s: json.loads(s),
        lambda s: json.loads(re.sub(r",\s*([}\]])", r"\1", s)),
        lambda s: ast.literal_eval(s),
    )
    for attempt in attempts:
        try:
            value = attempt(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _candidates(text: str) -> list[tuple[int, dict[str, Any]]]:
    """Every dict found in the text, with its position (later ones win ties: final answers come last)."""
    found: list[tuple[int, dict[str, Any]]] = []
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append((m.start(), value))
    sources = [b.code for b in fenced_blocks(text) if b.lang in ("json", "", "jsonc", "javascript", "js")]
    sources += _balanced_spans(text)
    for source in sources:
        obj = _load_object(source.strip())
        if obj is not None:
            found.append((max(text.find(source), 0), obj))
    return found


def _unwrap(obj: dict[str, Any]) -> dict[str, Any]:
    """``{"suggestion": {...fields...}, "note": ..}`` → the inner fields, outer extras kept."""
    if any(_norm_key(k) in _KNOWN for k in obj):
        return obj
    for key, value in obj.items():
        if isinstance(value, dict) and any(_norm_key(k) in _KNOWN for k in value):
            merged = {k: v for k, v in obj.items() if k != key}
            merged.update(value)
            return merged
    return obj


def _score(obj: dict[str, Any], mode: Mode) -> int:
    wanted = REPAIR_FIELDS if mode == "repair" else OPTIMIZE_FIELDS
    keys = {_norm_key(k) for k in obj}
    return 2 * len(keys & set(wanted)) + len(keys & _KNOWN)


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, list):
        items = [_as_text(v) for v in value]
        return "\n".join(f"{i}. {v}" for i, v in enumerate((x for x in items if x), 1)) or None
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _metric_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, dict):
        return [f"{k}: {v}" for k, v in value.items()]
    if isinstance(value, list):
        out = []
        for item in value:
            if isinstance(item, dict):
                name = item.get("name") or item.get("metric")
                rest = {k: v for k, v in item.items() if k not in ("name", "metric")}
                if name and len(rest) == 1:
                    out.append(f"{name}: {next(iter(rest.values()))}")
                else:
                    out.append(json.dumps(item, ensure_ascii=False))
            elif item is not None and str(item).strip():
                out.append(str(item).strip())
        return out
    text = str(value).strip()
    return [text] if text else []


def parse_suggestion(reply_text: str, mode: Mode) -> Suggestion:
    """Turn a Judge reply into a ``Suggestion``; never raises."""
    raw = reply_text or ""
    text = strip_thinking(raw)
    objects = [(pos, _unwrap(o)) for pos, o in _candidates(text)]
    scored = [(s, pos, o) for pos, o in objects if (s := _score(o, mode)) > 0]
    if not scored:
        note = "no JSON object in the reply; its text is the suggestion" if text else "the reply is empty"
        return Suggestion(mode=mode, text=text, raw=raw, parsed=False, note=note)
    # best match; then the fuller object (a wrapper keeps its extras); then the later one
    _, _, best = max(scored, key=lambda t: (t[0], len(t[2]), t[1]))
    return _from_object(best, mode, text, raw)


def _from_object(obj: dict[str, Any], mode: Mode, text: str, raw: str) -> Suggestion:
    """One Judge JSON object as a Suggestion: known fields (by any alias) set, the rest kept as extras."""
    suggestion = Suggestion(mode=mode, text=text, raw=raw, parsed=True)
    for key, value in obj.items():
        name = _norm_key(key)
        if name == "key_metrics":
            suggestion.key_metrics = _metric_list(value)
        elif name in _KNOWN and getattr(suggestion, name) is None:
            setattr(suggestion, name, _as_text(value))
        else:
            suggestion.extra[key] = value
    wanted = REPAIR_FIELDS if mode == "repair" else OPTIMIZE_FIELDS
    missing = [f for f in wanted if not getattr(suggestion, f)]
    if missing:
        suggestion.note = "missing: " + ", ".join(missing)
    return suggestion


# ---------------------------------------------------------------------------------------------- ideas

_IDEA_LISTS = ("ideas", "suggestions", "options", "proposals", "candidates", "plans")


def _arrays(text: str) -> list[tuple[int, list[Any]]]:
    """Every JSON array in the text (strict, then without trailing commas, then a Python literal)."""
    found: list[tuple[int, list[Any]]] = []
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\[", text):
        try:
            value, _ = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(value, list):
            found.append((m.start(), value))
    for block in fenced_blocks(text):
        code = block.code.strip()
        if block.lang in ("json", "", "jsonc", "javascript", "js", "python") and code.startswith("["):
            for attempt in (json.loads, lambda c: json.loads(re.sub(r",\s*([}\]])", r"\1", c)), ast.literal_eval):
                try:
                    value = attempt(code)
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    continue
                if isinstance(value, list):
                    found.append((max(text.find(code), 0), value))
                    break
    return found


def _idea_key(s: Suggestion) -> str:
    """What makes two ideas the same idea: the issue or bottleneck and the method, words only."""
    head = s.critical_issue if s.mode == "repair" else s.bottleneck
    words = f"{head or ''} {s.optimization_method or s.minimal_fix_hint or ''}".casefold()
    return " ".join(re.findall(r"\w+", words)) or " ".join(re.findall(r"\w+", s.text.casefold()))


def parse_ideas(reply_text: str, mode: Mode, k: int) -> list[Suggestion]:
    """Up to ``k`` distinct Judge suggestions from one reply, best first; never raises.

    Read, in order of preference: a JSON array of suggestion objects (or an object holding one under
    ``ideas``, ``suggestions``, ``options`` …), else every suggestion object in the reply in the order
    written. A ``rank`` field orders them where given. Repeats of an idea (same issue or bottleneck and
    method) are dropped. A reply with no JSON at all is one free-text idea, as ``parse_suggestion`` makes
    it. Each idea's ``note`` says its place (``idea 2 of 3``).
    """
    raw = reply_text or ""
    text = strip_thinking(raw)
    lists: list[tuple[int, int, list[dict[str, Any]]]] = []
    for pos, array in _arrays(text):
        objects = [_unwrap(o) for o in array if isinstance(o, dict)]
        scored = [o for o in objects if _score(o, mode) > 0]
        if scored:
            lists.append((len(scored), pos, scored))
    for pos, obj in _candidates(text):
        for key, value in obj.items():
            if _norm_key(key) in _IDEA_LISTS and isinstance(value, list):
                scored = [_unwrap(o) for o in value if isinstance(o, dict) and _score(_unwrap(o), mode) > 0]
                if scored:
                    lists.append((len(scored), pos, scored))
    if lists:
        _, _, chosen = max(lists, key=lambda t: (t[0], t[1]))  # the fullest list; the later of equals
    else:
        seen: set[str] = set()
        chosen = []
        for _, obj in sorted(_candidates(text), key=lambda t: t[0]):
            obj = _unwrap(obj)
            marker = json.dumps(obj, sort_keys=True, default=str)
            if _score(obj, mode) > 0 and marker not in seen:
                seen.add(marker)
                chosen.append(obj)
        # an object nested inside another one found too (a wrapper and its inner fields): keep the outer
        chosen = [o for o in chosen if not any(o is not p and _nested_in(o, p) for p in chosen)]
    if not chosen:
        return [parse_suggestion(raw, mode)]

    def rank(obj: dict[str, Any]) -> float:
        value = next((v for k2, v in obj.items() if _norm_key(k2) == "rank"), None)
        try:
            return float(value)
        except (TypeError, ValueError):
            return float("inf")

    ordered = sorted(enumerate(chosen), key=lambda t: (rank(t[1]), t[0]))
    ideas: list[Suggestion] = []
    keys: set[str] = set()
    for _, obj in ordered:
        idea = _from_object(obj, mode, json.dumps(obj, ensure_ascii=False), raw)
        key = _idea_key(idea)
        if key in keys:
            continue
        keys.add(key)
        ideas.append(idea)
    ideas = ideas[: max(1, k)]
    for i, idea in enumerate(ideas, start=1):
        idea.note = "; ".join(n for n in (f"idea {i} of {len(ideas)}", idea.note) if n)
    return ideas


def _nested_in(inner: dict[str, Any], outer: dict[str, Any]) -> bool:
    return any(v == inner or (isinstance(v, dict) and _nested_in(inner, v)) for v in outer.values())
