"""The iteration timeline: a tree of branches, each node with its status and speedup, the best starred.

``main`` is drawn in full; a branch made at an iteration is drawn as a child of the branch it left,
holding only its own iterations, so the tree reads the way the session grew (ARCHITECTURE.md §8).
A label wider than the column ends in "…"; ``i`` shows the highlighted node in full
(tui/screens/workbench_keys.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

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
    cost_usd: float | None = None


STATUS_MARK = {"correct": "✓", "incorrect": "✗", "compile_error": "⚠", "runtime_error": "!", "timeout": "⧗"}


def node_label(item: TimelineItem, best_sha: str | None) -> str:
    mark = STATUS_MARK.get(item.status, "·")
    star = " ★ best" if item.sha == best_sha else ""
    return f"{mark} #{item.number} {item.phase} {format_speedup(item.speedup)}{star}"


def _shared(a: list[TimelineItem], b: list[TimelineItem]) -> int:
    """How many iterations two branches share from the seed on (branches share a prefix of commits)."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if x.sha != y.sha:
            break
        count += 1
    return count


def branch_tree(
    branches: dict[str, list[TimelineItem]], root: str = "main"
) -> list[tuple[str, str | None, int]]:
    """(branch, parent, shared) for every branch, parents before children.

    ``root`` (``main``, else the first branch) is drawn in full; every other branch hangs under the
    branch it left, from where it left it (``shared`` iterations in common). A branch's parent is the
    one it shares the most iterations with among those placed before it; they are placed in order
    of how early they leave the root, then by name (``from-iter-2`` before ``from-iter-3``), so an
    offshoot is always drawn as the child of what it was made from.
    """
    names = list(branches)
    if not names:
        return []
    top = root if root in branches else names[0]
    rest = sorted(
        (n for n in names if n != top), key=lambda n: (_shared(branches[n], branches[top]), n)
    )
    placed: list[tuple[str, str | None, int]] = [(top, None, 0)]
    for name in rest:
        parent, shared = max(
            ((p, _shared(branches[name], branches[p])) for p, _, _ in placed), key=lambda pair: pair[1]
        )
        placed.append((name, parent, shared))
    return placed


class Timeline(Tree[NodeRef]):

    def __init__(self, **kwargs: object) -> None:
        super().__init__("session", **kwargs)  # type: ignore[arg-type]
        self.show_root = False
        self._items: dict[tuple[str, int], TimelineItem] = {}

    def show(
        self,
        branches: dict[str, list[TimelineItem]],
        best_sha: str | None,
        current: NodeRef | None,
        current_branch: str | None = None,
        notes: dict[str, str] | None = None,
    ) -> None:
        """Rebuild: ``main`` in full, each other branch nested under the branch it was made from,
        holding only its own iterations; ``current_branch`` (where the loop goes on) is marked.
        ``notes``: a few words after a branch's title (an exploration's branch: its state, best, cost)."""
        self.clear()
        self._items = {(name, it.number): it for name, items in branches.items() for it in items}
        nodes = {}
        leaves = {}
        for branch, parent, shared in branch_tree(branches):
            items = branches[branch]
            fresh = items[shared:]
            title = branch
            if notes and branch in notes:  # an exploration's branch: explore/<N>-<k> names where it starts
                title += f" · {notes[branch]}"
            elif parent is not None:
                fork = items[shared - 1].number if shared else None
                title += f" (from #{fork})" if fork is not None else " (from the task)"
                if not fresh:
                    title += " · no iterations of its own yet"
            if branch == current_branch:
                title += " · current"
            node = (nodes[parent] if parent is not None else self.root).add(title, expand=True)
            nodes[branch] = node
            for item in fresh:
                leaves[item.sha] = node.add_leaf(node_label(item, best_sha), data=NodeRef(branch, item.number))
        if current is not None:  # an iteration a branch shares with its parent is drawn under the parent
            sha = next((it.sha for it in branches.get(current.branch, []) if it.number == current.number), None)
            if sha in leaves:
                self.call_after_refresh(self.move_cursor, leaves[sha])
        self.root.expand()

    def render_label(self, node: TreeNode[NodeRef], base_style: Style, style: Style) -> Text:
        """The label, cut with "…" to the room its depth leaves in the column (no silent cut)."""
        label = super().render_label(node, base_style, style)
        depth, parent = 0, node.parent
        while parent is not None:
            depth, parent = depth + 1, parent.parent
        room = self.scrollable_content_region.width - (depth - 1) * self.guide_depth
        if room > 4 and label.cell_len > room:
            label.truncate(room, overflow="ellipsis")
        return label

    def full_text(self) -> tuple[str, str] | None:
        """The highlighted node in full (``i``): its label, and an iteration's branch, commit and cost."""
        node = self.cursor_node
        if node is None:
            return None
        lines = [str(node.label)]
        ref = node.data
        if ref is not None:
            lines.append(f"branch {ref.branch}, iteration #{ref.number}")
            item = self._items.get((ref.branch, ref.number))
            if item is not None:
                cost = f"${item.cost_usd:.4f}" if item.cost_usd is not None else "cost unknown"
                lines.append(f"{item.phase} · {item.status} · {format_speedup(item.speedup)} · {cost} · {item.sha[:12]}")
        return "Timeline", "\n".join(lines)

    def labels(self) -> list[str]:
        """Every node label, depth-first (for tests and the text export)."""
        out: list[str] = []

        def walk(node) -> None:  # type: ignore[no-untyped-def]
            for child in node.children:
                out.append(str(child.label))
                walk(child)

        walk(self.root)
        return out
