"""The cudaforge Textual application: screens, themes, keymap, command palette, quit guard.

Startup stays light on purpose (first full screen within a second on a small machine): nothing
here imports torch or the evaluator; sessions are read through GitPython only.

Quitting is an ordinary event (ARCHITECTURE §2, §8). ``q``/``ctrl+q`` with no stage running quits
at once. While one runs, the loop is asked to stop: an LLM call is cancelled, an evaluation is let
finish and is committed, and the app says what it waits for ("waiting for the build of iteration 3
to finish and be committed — ctrl+q again to leave now") and quits when it is done; a second
press leaves at once (the journal keeps the stage, redone on resume). A hang-up (SIGHUP: the SSH
connection dropped), SIGTERM and SIGINT are the first press without a terminal to show it on.
Exit codes: 0 after a quit (also one that waited), 130 when left at once, 128 + the signal after one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from engine.activity import Activity
from engine.approval import POLICIES, check_policy
from engine.cli.interrupts import detach_terminal
from sessions.paths import default_sessions_root
from sessions.repo import SessionRepo
from themes.catalog import DEFAULT_THEME, THEME_NAMES, THEMES
from tui import settings as tui_settings
from tui.live import LoopFactory, default_loop_factory
from tui.messages import SettingChanged
from tui.screens.workbench import REPLAY, WorkbenchScreen
from tui.terminal_output import hang_up_proof
from tui.writers import Writers

QUIT_POLL_S = 0.1
EXIT_LEFT_NOW = 130


class CudaforgeApp(App[int]):
    CSS_PATH = "styles/app.tcss"
    TITLE = "cudaforge"
    BINDINGS = [
        Binding("q", "quit_app", "Quit", id="app.quit"),
        # Textual's own ctrl+q quits without asking the loop: this one goes through the same guard, from any screen
        Binding("ctrl+q", "quit_app", "Quit (any screen)", id="app.quit-anywhere", show=False, priority=True),
        Binding("f1,question_mark", "help", "Help", id="app.help"),
    ]
    NOTICE_S = 8  # how long the demo's notice stays (the status line keeps saying "scripted demo")

    def __init__(
        self,
        sessions_root: Path | None = None,
        session: SessionRepo | None = None,
        mode: str = REPLAY,
        loop_factory: LoopFactory | None = None,
        notice: str | None = None,
        config: Any = None,
        session_config: Callable[[SessionRepo], Any] | None = None,
        model_folder: Path | None = None,
    ) -> None:
        """``config``: the command line's resolved settings, for ``session`` (the session it named).
        ``session_config(repo)``: the settings for any other session opened here (the browser's
        ``o``, or the named one opened again): its stored models and round target, as
        ``cudaforge open`` would resolve them; without it, ``config`` serves every session.
        ``model_folder``: a folder ``cudaforge extract`` wrote, shown first in the model view
        (``cudaforge new OUT``) when no session is named."""
        super().__init__()
        self.model_folder = Path(model_folder) if model_folder else None
        self.notice = notice  # shown for as long as the app runs (the demo says it is scripted)
        self.sessions_root = Path(sessions_root) if sessions_root else default_sessions_root()
        self.session = session
        self.start_mode = mode
        # the resolved settings of the command line (engine.config); every loop the app starts uses them
        self.settings = tui_settings.load_settings(config)
        self.config = self.settings.config
        self.session_config = session_config
        self._named_session_used = False
        self.loop_factory: LoopFactory = loop_factory or self._make_loop
        self.approval_policy = self.settings.approval_policy
        for theme in THEMES:
            self.register_theme(theme)
        wanted = self.settings.theme or DEFAULT_THEME
        if wanted not in self.available_themes:
            self.settings.problems.append(f"unknown theme {wanted!r}; use one of {', '.join(THEME_NAMES)}")
            wanted = DEFAULT_THEME
        self.theme = wanted
        self._remember_theme = False
        #: this app's live loops, one per session (tui/writers.py)
        self.writers = Writers()
        self._quit_code: int | None = None  # set once a quit waits for the loop
        self._quit_said = ""
        #: what was still running when the app was left at once (commands.py then leaves the process)
        self.left_running: list[Activity | None] = []
        if os.environ.get("SSH_CONNECTION") or os.environ.get("CUDAFORGE_NO_ANIMATION"):
            self.animation_level = "none"  # over SSH animation only costs bandwidth

    def loop_config_for(self, repo: SessionRepo) -> Any:
        """The settings a loop on ``repo`` runs with: the command line's for the session it named (the
        first time), else the session's own, resolved as ``cudaforge open`` does."""
        named = self.session is not None and Path(self.session.path) == Path(repo.path)
        if (named and not self._named_session_used) or self.session_config is None:
            self._named_session_used = self._named_session_used or named
            return self.config
        return self.session_config(repo)

    def get_driver_class(self) -> Any:
        """Textual's driver for this platform, with terminal output that survives a hang-up
        (``tui/terminal_output.py``: otherwise a write failing as SSH drops can freeze the app)."""
        return hang_up_proof(super().get_driver_class())

    def _make_loop(self, repo: SessionRepo, on_event: Any) -> Any:
        return default_loop_factory(repo, on_event, config=self.loop_config_for(repo))

    def on_mount(self) -> None:
        if not self.is_headless:  # a real terminal: a hang-up or a kill is a quit, not a crash
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop = asyncio.get_running_loop()
                for signum in (signal.SIGTERM, signal.SIGINT):  # handled as the app's own callbacks
                    loop.add_signal_handler(signum, self.call_later, self.signalled, signum)
                signal.signal(signal.SIGHUP, functools.partial(self._hung_up, loop))
        if self.settings.keymap:
            self.set_keymap(self.settings.keymap)
        for problem in self.settings.problems:
            self.notify(problem, severity="warning")
        if self.notice:
            self.title = f"cudaforge · {self.notice.split(':')[0].lower()}"
            self.notify(self.notice, title="cudaforge demo", timeout=self.NOTICE_S)
        if self.session is not None:  # straight to the workbench: the browser is built only if asked for
            self.push_screen(
                WorkbenchScreen(self.session, mode=self.start_mode, loop_factory=self.loop_factory)
            )
        elif self.model_folder is not None:
            self.open_model(self.model_folder)
        else:
            from tui.screens.browser import BrowserScreen  # only when no session was named: faster start

            self.push_screen(BrowserScreen(self.sessions_root))
        self._remember_theme = True

    # ------------------------------------------------------------------ navigation

    def show_browser(self) -> None:
        """Back to the screen the current one was opened from: the session browser or the model view
        under it, or else a new browser in its place.

        Screens navigate through the app, so the browser, the model view and the workbench need not
        import each other.
        """
        from tui.screens.browser import BrowserScreen
        from tui.screens.model import ModelScreen

        if any(isinstance(s, (BrowserScreen, ModelScreen)) for s in self.screen_stack[:-1]):
            self.pop_screen()
        else:
            self.switch_screen(BrowserScreen(self.sessions_root))

    def open_model(self, root: Path) -> None:
        """The model view of the folder ``cudaforge extract`` wrote at ``root``, above the current screen."""
        from tui.screens.model import ModelScreen  # imported only when a model folder is shown

        self.push_screen(ModelScreen(root))

    def open_workbench(self, repo: SessionRepo, mode: str, owns_repo: bool = True) -> None:
        """A workbench on ``repo`` above the current screen (``owns_repo``: it closes the repo when it leaves)."""
        self.push_screen(WorkbenchScreen(repo, mode=mode, loop_factory=self.loop_factory, owns_repo=owns_repo))

    # ------------------------------------------------------------------ settings

    def watch_theme(self, theme: str) -> None:
        if getattr(self, "_remember_theme", False):
            tui_settings.remember(theme=theme)
            self.post_message(SettingChanged("theme", theme))

    def set_policy(self, policy: str) -> None:
        """Change the approval policy: the running loop applies it from its next gate on."""
        check_policy(policy)
        self.approval_policy = policy
        tui_settings.remember(approval_policy=policy)
        self.post_message(SettingChanged("approval_policy", policy))
        for screen in self.screen_stack:
            if isinstance(screen, WorkbenchScreen):
                screen.apply_policy(policy)
        self.notify(f"approval policy: {policy}")

    # ------------------------------------------------------------------ keys, help, palette

    def _bindings_by_id(self, screen: Screen[Any]) -> dict[str, tuple[list[str], Binding, Any]]:
        """The bindings that work on ``screen``: its own and, unless it is modal (a modal screen hides
        the app's keys), the app's; one entry per binding (by id) with all its keys.

        Left out: Textual's system bindings, bindings without a description, and actions the
        screen says never apply here (``check_action`` False): help lists only keys that work.
        """
        found: dict[str, tuple[list[str], Binding, Any]] = {}
        nodes: list[Any] = [screen] if screen.is_modal else [screen, self]
        for node in nodes:
            for key, bindings in node._bindings.key_to_bindings.items():
                for binding in bindings:
                    if binding.system or not binding.description or not self._applies(node, binding):
                        continue
                    ident = binding.id or f"{node.__class__.__name__}.{binding.action}"
                    keys, _, _ = found.setdefault(ident, ([], binding, node))
                    if key not in keys:
                        keys.append(key)
        return found

    @staticmethod
    def _applies(node: Any, binding: Binding) -> bool:
        from textual.actions import parse

        namespace, name, params = parse(binding.action)
        if namespace:  # "app.focus_next" and the like: asked of the node they name
            return True
        return node.check_action(name, params) is not False

    def binding_rows(self, screen: Screen[Any] | None = None) -> list[tuple[str, str, str]]:
        """(keys, description, id) for the help screen; bindings without an id show "—", and a key
        that applies here but not at this moment (``check_action`` None: x while nothing runs) says so."""
        from textual.actions import parse

        rows = []
        for _, (keys, binding, node) in self._bindings_by_id(screen or self.screen).items():
            namespace, name, params = parse(binding.action)
            later = not namespace and node.check_action(name, params) is None
            description = f"{binding.description} (not now)" if later else binding.description
            rows.append((",".join(keys), description, binding.id or "—"))
        return rows

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for name in THEME_NAMES:
            yield SystemCommand(
                f"Theme: {name}",
                f"switch to the {name} theme (remembered)",
                lambda name=name: setattr(self, "theme", name),
            )
        for policy in POLICIES:
            yield SystemCommand(
                f"Approval policy: {policy}",
                "how Judge suggestions are approved (remembered)",
                lambda policy=policy: self.set_policy(policy),
            )
        for ident, (keys, binding, node) in self._bindings_by_id(screen).items():
            if binding.system or not binding.description:
                continue
            if node is screen and screen.check_action(binding.action, ()) is False:
                continue
            yield SystemCommand(
                f"{binding.description} ({','.join(keys)})",
                f"action {ident}",
                lambda node=node, action=binding.action: self.run_action(action, node),
            )

    def action_help(self) -> None:
        from tui.screens.dialogs import HelpScreen

        self.push_screen(HelpScreen(self.binding_rows()))

    def engine_busy(self) -> bool:
        if self.writers.busy():
            return True
        return any(getattr(getattr(s, "adapter", None), "busy", False) for s in self.screen_stack)

    def _busy_adapters(self) -> list[Any]:
        found = {id(a): a for a in self.writers.busy()}
        for screen in self.screen_stack:
            adapter = getattr(screen, "adapter", None)
            if getattr(adapter, "busy", False):
                found[id(adapter)] = adapter
        return list(found.values())

    def action_quit_app(self) -> None:
        """Quit now when nothing runs; else stop the loop, say what it waits for, quit when it is done;
        pressed again while waiting: leave at once."""
        if self._quit_code is not None:
            self.leave_now()
            return
        self.begin_quit(0)

    def begin_quit(self, code: int) -> None:
        busy = self._busy_adapters()
        if not busy:
            self.exit(code)
            return
        self._quit_code = code
        for adapter in busy:
            adapter.stop()
        self._say_waiting()
        self.set_interval(QUIT_POLL_S, self._quit_when_idle)

    def leave_now(self) -> None:
        """Leave with a stage still running (its journal keeps it; the next run redoes it)."""
        self.left_running = [a.activity for a in self._busy_adapters()]
        self.exit(EXIT_LEFT_NOW if self.left_running else (self._quit_code or 0))

    def waiting_text(self) -> str:
        """``waiting for the build of iteration 3 to finish and be committed — ctrl+q again to leave now``."""
        parts = []
        for adapter in self._busy_adapters():
            activity = adapter.activity
            parts.append(activity.stopping() if activity is not None else "waiting for the loop to stop")
        return "; ".join(parts or ["quitting"]) + " — ctrl+q again to leave now"

    def _say_waiting(self) -> None:
        text = self.waiting_text()
        if text != self._quit_said:
            self._quit_said = text
            self.clear_notifications()
            self.notify(text, title="quitting", severity="warning", timeout=3600)

    def _quit_when_idle(self) -> None:
        if self._busy_adapters():
            self._say_waiting()  # the build became the check: say so
            return
        self.exit(self._quit_code or 0)

    def _hung_up(self, loop: asyncio.AbstractEventLoop, signum: int, frame: Any) -> None:
        """SIGHUP, as a plain signal handler: it runs before the SIGCONT the kernel sends with it.

        The terminal is gone. Detach from it, and take SIGCONT away from Textual, whose handler
        would "resume" on the dead terminal, read its size as 80×24 and lay every screen out again;
        then quit on the event loop like any other signal.
        """
        detach_terminal()
        signal.signal(signal.SIGCONT, signal.SIG_DFL)
        loop.call_soon_threadsafe(self.call_later, self.signalled, signal.SIGHUP)

    def signalled(self, signum: int) -> None:
        """SIGHUP, SIGTERM, SIGINT: a quit that waits for the stage in flight; a second SIGTERM or
        SIGINT leaves at once."""
        if signum == signal.SIGHUP:
            # stdin reads EOF at once now: stop Textual's input thread rather than let it spin on it
            disable_input = getattr(getattr(self, "_driver", None), "disable_input", None)
            if disable_input is not None:
                disable_input()
        if self._quit_code is None:
            self.begin_quit(128 + signum)
        elif signum != signal.SIGHUP:
            self.leave_now()

    def continue_on_branch(self, repo: SessionRepo, branch: str) -> bool:
        """Hook for ``b`` in replay: resume the loop live on a new branch. True when it did.

        Needs a loop: with a ``loop_factory`` this switches the session to the branch, makes the loop
        there and opens a live workbench on it; without one it returns False and the replay screen
        tells the user. The switch comes first: a loop writes the branch checked out when it is made
        (``Loop(branch=None)`` is HEAD), so one made before it committed on the old branch while the
        screen showed the new one, and its agents read the old branch's history (issue 46.1).
        """
        factory = self.loop_factory
        previous = repo.current_branch
        repo.switch_branch(branch)
        try:  # make the loop before leaving replay: a missing key or a bad config keeps the user here
            loop = factory(repo, lambda event: None)
        except Exception as error:
            loop = None
            self.notify(f"The loop could not start ({error}).", severity="warning")
        if loop is None:
            repo.switch_branch(previous)
            return False

        def reuse(_repo: SessionRepo, on_event: Any) -> Any:
            loop.on_event = on_event  # the workbench's adapter receives its events from now on
            return loop

        self.push_screen(WorkbenchScreen(repo, mode="live", branch=branch, loop_factory=reuse))
        return True
