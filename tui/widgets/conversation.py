"""The conversation pane: Coder and Judge messages as Markdown, streamed as tokens arrive.

Tokens are buffered and flushed to the Markdown widget at most every ``FLUSH_S`` seconds: a
reply arrives as hundreds of tiny pieces and re-rendering Markdown for each would starve the
keyboard over a slow link.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Markdown, Static

from tui.model import ChatMessage

FLUSH_S = 0.1


class ChatEntry(Vertical):
    DEFAULT_CSS = """
    ChatEntry { height: auto; margin: 0 0 1 0; }
    ChatEntry > .chat-header { background: $panel; padding: 0 1; }
    ChatEntry.-judge > .chat-header { color: $secondary; }
    ChatEntry.-coder > .chat-header { color: $primary; }
    ChatEntry > Markdown { margin: 0; padding: 0 1; }
    """

    def __init__(self, message: ChatMessage) -> None:
        super().__init__(classes=f"-{message.role}")
        self.message = message

    def compose(self) -> ComposeResult:
        yield Static(self.message.header(), classes="chat-header")
        yield Markdown(self.message.text)

    def refresh_message(self) -> None:
        """Redraw from ``self.message`` (a no-op before compose, which reads the message itself)."""
        headers = self.query(".chat-header")
        if not headers:
            return
        headers.first(Static).update(self.message.header())
        self.query_one(Markdown).update(self.message.text)


class ConversationPane(VerticalScroll):
    DEFAULT_CSS = """
    ConversationPane { height: 1fr; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._streaming: ChatEntry | None = None
        self._dirty = False

    def on_mount(self) -> None:
        self.set_interval(FLUSH_S, self._flush)

    def show(self, messages: Iterable[ChatMessage]) -> None:
        """Replace the conversation (replay: the messages recorded for one iteration)."""
        self._streaming = None
        self.remove_children()
        entries = [ChatEntry(m) for m in messages]
        if entries:
            self.mount_all(entries)
        else:
            self.mount(Static("no messages in this iteration", classes="chat-empty"))

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
        return "\n".join(f"{e.message.header()}\n{e.message.text}" for e in self.query(ChatEntry))
