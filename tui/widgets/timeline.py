"""The iteration timeline: a tree of branches, each node with its status and speedup, the best starred."""

from __future__ import annotations

from dataclasses import dataclass

from textual.widgets import Tree

from tui.model import format_speedup


@dataclass(frozen=True)
class NodeRef:
    branch: str
    number: int


@dataclass(frozen=True)
class TimelineItem:
    number: int
    sha: str
    phase: str
    status: str
    speedup: float | None


STATUS_MARK = {"correct": "✓", "incorrect": "✗", "compile_error": "⚠", "runtime_error": "!", "timeout": "⧗"}


def node_label(item: TimelineItem, best_sha: str | None) -> str:
    mark = STATUS_MARK.get(item.status, "·")
    star = " ★ best" if item.sha == best_sha else ""
    return f"{mark} #{item.number} {item.phase} {format_speedup(item.speedup)}{star}"


class Timeline(Tree[NodeRef]):

    def __init__(self, **kwargs: object) -> None:
        super().__init__("session", **kwargs)  # type: ignore[arg-type]
        self.show_root = False

    def show(
        self, branches: dict[str, list[TimelineItem]], best_sha: str | None, current: NodeRef | None
    ) -> None:
        """Rebuild: the first branch in full, other branches from where they leave it."""
        self.clear()
        seen: set[str] = set()
        for branch, items in branches.items():
            fresh = [it for it in items if it.sha not in seen]
            fork = items[len(items) - len(fresh) - 1].number if len(fresh) < len(items) else None
            title = branch if fork is None else f"{branch} (from #{fork})"
            node = self.root.add(title, expand=True)
            for item in fresh:
                seen.add(item.sha)
                leaf = node.add_leaf(node_label(item, best_sha), data=NodeRef(branch, item.number))
                if current is not None and current == NodeRef(branch, item.number):
                    self.call_after_refresh(self.move_cursor, leaf)
        self.root.expand()

    def labels(self) -> list[str]:
        """Every node label, depth-first (for tests and the text export)."""
        out: list[str] = []

        def walk(node) -> None:  # type: ignore[no-untyped-def]
            for child in node.children:
                out.append(str(child.label))
                walk(child)

        walk(self.root)
        return out
