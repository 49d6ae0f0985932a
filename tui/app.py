"""The cudaforge Textual application: screens, themes, keymap, command palette, quit guard.

Startup stays light on purpose (first full screen within a second on a small machine): nothing
here imports torch or the evaluator; sessions are read through GitPython only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from engine.approval import POLICIES, check_policy
from sessions.paths import default_sessions_root
from sessions.repo import SessionRepo
from themes.catalog import DEFAULT_THEME, THEME_NAMES, THEMES
from tui import settings as tui_settings
from tui.live import LoopFactory, default_loop_factory
from tui.messages import SettingChanged
from tui.screens.workbench import REPLAY, WorkbenchScreen


class CudaforgeApp(App[int]):
    CSS_PATH = "styles/app.tcss"
    TITLE = "cudaforge"
    BINDINGS = [
        Binding("q", "quit_app", "Quit", id="app.quit"),
        # Textual's own ctrl+q quits without asking; ours asks while a stage runs, from any screen
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
    ) -> None:
        """``config``: the command line's resolved settings, for ``session`` (the session it named).
        ``session_config(repo)``: the settings for any other session opened here (the browser's
        ``o``, or the named one opened again): its stored models and round target, as
        ``cudaforge open`` would resolve them; without it, ``config`` serves every session."""
        super().__init__()
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

    def _make_loop(self, repo: SessionRepo, on_event: Any) -> Any:
        return default_loop_factory(repo, on_event, config=self.loop_config_for(repo))

    def on_mount(self) -> None:
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
        else:
            from tui.screens.browser import BrowserScreen  # only when no session was named: faster start

            self.push_screen(BrowserScreen(self.sessions_root))
        self._remember_theme = True

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
        return any(getattr(getattr(s, "adapter", None), "busy", False) for s in self.screen_stack)

    def action_quit_app(self) -> None:
        if not self.engine_busy():
            self.exit(0)
            return

        from tui.screens.dialogs import ConfirmScreen

        def answer(yes: bool | None) -> None:
            if yes:
                self.exit(0)

        self.push_screen(
            ConfirmScreen("A stage is running. Quit anyway? (the loop stops with the app)"), answer
        )

    def continue_on_branch(self, repo: SessionRepo, branch: str) -> bool:
        """Hook for ``b`` in replay: resume the loop live on a new branch. True when it did.

        Needs a loop: with a ``loop_factory`` this switches the session to the branch and opens a
        live workbench on it; without one it returns False and the replay screen tells the user.
        """
        factory = self.loop_factory
        try:  # make the loop before leaving replay: a missing key or a bad config keeps the user here
            loop = factory(repo, lambda event: None)
        except Exception as error:
            self.notify(f"The loop could not start ({error}).", severity="warning")
            return False
        if loop is None:
            return False
        repo.switch_branch(branch)

        def reuse(_repo: SessionRepo, on_event: Any) -> Any:
            loop.on_event = on_event  # the workbench's adapter receives its events from now on
            return loop

        self.push_screen(WorkbenchScreen(repo, mode="live", branch=branch, loop_factory=reuse))
        return True
