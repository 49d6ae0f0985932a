"""The conversation pane: Coder and Judge messages as Markdown, streamed as tokens arrive.

Tokens are buffered and flushed at most every ``FLUSH_S`` seconds: a reply arrives as hundreds of
tiny pieces and re-rendering Markdown for each would starve the keyboard over a slow link.

Each message is one widget that draws its header and its Markdown (Rich's renderer) itself.
Textual's ``Markdown`` widget mounts a widget per block, after its own mount, so the pane was laid
out twice and its messages cost ~12 % of the workbench's first frame on a 2-core machine.

The Judge answers in JSON (engine/agents/suggestion.py's schema): its entry shows the fields, labelled
(``tui.model.judge_reply_markdown``), and the raw text only when no JSON parses — a reply still
streaming, or prose (ARCHITECTURE.md §8).
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Group, RenderableType
from rich.markdown import Markdown
from rich.padding import Padding
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widget import AwaitMount, Widget
from textual.widgets import Static

from tui.model import ChatMessage, judge_reply_markdown, scrub

FLUSH_S = 0.1


class ChatEntry(Widget):
    """One message: a header line (role, model, tokens, cost) above the reply as Markdown."""

    COMPONENT_CLASSES = {"chat-entry--header"}

    def __init__(self, message: ChatMessage) -> None:
        super().__init__(classes=f"-{message.role}")
        self.message = message
        self._body: tuple[str, str] = ("", "")  # (text, what it shows): parsed once per text

    def render(self) -> RenderableType:
        style = self.get_component_rich_style("chat-entry--header")
        header = Padding(Text(self.message.header(), style=style), (0, 1), style=style, expand=True)
        code = "ansi_dark" if self.app.current_theme.dark else "ansi_light"  # the terminal's palette
        body = Markdown(self.body_markdown(), code_theme=code, inline_code_theme=code)
        return Group(header, Padding(body, (0, 1)))

    def body_markdown(self) -> str:
        """The reply as shown: the Judge's fields when its JSON parses, else the text as written."""
        if self._body[0] != self.message.text or not self._body[1]:
            text = scrub(self.message.text)
            shown = (judge_reply_markdown(text) or text) if self.message.role == "judge" else text
            self._body = (self.message.text, shown)
        return self._body[1]

    def refresh_message(self) -> None:
        """Redraw from ``self.message`` (its text or header changed)."""
        self.refresh(layout=True)


class ConversationPane(VerticalScroll):

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._streaming: ChatEntry | None = None
        self._dirty = False

    def on_mount(self) -> None:
        self.set_interval(FLUSH_S, self._flush)

    def show(self, messages: Iterable[ChatMessage]) -> AwaitMount:
        """Replace the conversation (replay: the messages recorded for one iteration).

        Returns the mount, which a caller may await to paint the messages in its next frame.
        """
        self._streaming = None
        self.remove_children()
        entries = [ChatEntry(m) for m in messages]
        if entries:
            return self.mount_all(entries)
        return self.mount(Static("no messages in this iteration", classes="chat-empty"))

    def stream_token(self, role: str, text: str) -> None:
        if self._streaming is None or self._streaming.message.role != role:
            self.query(".chat-empty").remove()
            self._streaming = ChatEntry(ChatMessage(role=role, text=""))
            self.mount(self._streaming)
        self._streaming.message.text += text
        self._dirty = True

    def finish_reply(self, message: ChatMessage) -> None:
        """A reply is complete: fix its text and header (model, tokens, cost)."""
        entry = self._streaming if self._streaming and self._streaming.message.role == message.role else None
        if entry is None:
            self.query(".chat-empty").remove()
            self.mount(ChatEntry(message))
        else:
            entry.message = message
            entry.refresh_message()
        self._streaming = None
        self.call_after_refresh(self.scroll_end, animate=False)

    def _flush(self) -> None:
        if self._dirty and self._streaming is not None and self._streaming.is_mounted:
            self._streaming.refresh_message()
            self.call_after_refresh(self.scroll_end, animate=False)
        self._dirty = False

    def transcript_text(self) -> str:
        """Everything shown, as plain text (for tests and copy)."""
        return "\n".join(f"{e.message.header()}\n{e.body_markdown()}" for e in self.query(ChatEntry))
