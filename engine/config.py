"""cudaforge's configuration: a typed dataclass tree loaded from TOML files and command-line flags.

Where settings come from, weakest first: the built-in defaults (``engine/data/default_config.toml``
documents them), the user file ``$XDG_CONFIG_HOME/cudaforge/config.toml`` (``~/.config`` when unset;
``CUDAFORGE_CONFIG`` names another file), the project file ``./cudaforge.toml``, then command-line
flags. Later sources override earlier ones key by key, so a project file need only name what it
changes. This is the one settings resolution of every front end (ARCHITECTURE.md §8): the TUI's
``new``/``open``, ``run --headless``, ``bench``, ``eval`` and ``check`` all call :func:`load_config`
with their flags as ``overrides``, and every key documented in the defaults file is read by the
commands it applies to.

Every key is checked: a typo is an error that names the file, the table and the closest valid key
("unknown key 'rouns' in cudaforge.toml [loop]; did you mean 'rounds'?"), because a silently ignored
setting is worse than a refused one. API keys are never read from here: a provider table names the
environment variable that holds its key (``api_key_env``).
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, get_args

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from engine.approval import POLICIES as APPROVAL_POLICIES
from engine.approval import ApprovalPolicy
from engine.guard.rules import POLICIES as GUARD_POLICIES
from engine.guard.rules import GuardPolicy, GuardPolicyError, check_rule_ids

PROJECT_FILE = "cudaforge.toml"
# Each choice is one Literal: the dataclass fields are annotated with it and validation reads its values.
Device = Literal["auto", "cpu", "cuda"]
SandboxMode = Literal["auto", "bwrap", "landlock", "off"]  # what confines the worker (engine.sandbox)
MetricSet = Literal["default", "small", "large"]
ProviderName = Literal["openai", "anthropic"]
DEVICES: tuple[str, ...] = get_args(Device)
SANDBOX_MODES: tuple[str, ...] = get_args(SandboxMode)
# how a worker process starts (engine.eval.forkserver): forked from a server that imported torch once, or
# as a new interpreter; auto forks both CPU and CUDA workers (fork: the same; exec: never)
WorkerStart = Literal["auto", "fork", "exec"]
WORKER_STARTS: tuple[str, ...] = get_args(WorkerStart)
METRIC_SETS: tuple[str, ...] = get_args(MetricSet)
PROVIDER_NAMES: tuple[str, ...] = get_args(ProviderName)
DTYPES = ("float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


class ConfigError(Exception):
    """A configuration file or flag is unusable; the message says where and what to write instead."""


@dataclass
class ModelsConfig:
    """``provider/model`` for each agent (``openai/o3``, ``anthropic/claude-sonnet-4-5``, ``scripted/DIR``)."""

    coder: str = "openai/o3"
    judge: str = "openai/o3"


@dataclass
class LoopConfig:
    rounds: int = 10
    approval: ApprovalPolicy = "ask"  # ask | auto | ask-if-flagged (engine.approval)
    #: how often the Coder is told its kernel repeats an earlier one before the repeat is committed
    repeat_asks: int = 1
    #: a correct kernel within this fraction of the branch's best is re-timed beside it (0: never)
    retime_within: float = 0.05


COMPILE_MODES = ("default", "max-autotune")  # torch.compile modes a baseline may use (engine.eval.baselines)


@dataclass
class TimeoutsConfig:
    """Seconds per evaluation stage (``engine.eval.options.StageTimeouts`` takes its defaults from here)."""

    start: float = 120.0
    setup: float = 120.0
    build: float = 900.0
    check: float = 300.0
    time: float = 300.0


@dataclass
class EvalConfig:
    """``[eval]``: the one place these defaults are written (``EvalOptions`` and the prompts read them)."""

    device: Device = "auto"
    trials: int = 5  # fresh seeded inputs per correctness check (ARCHITECTURE.md §3: at least 5)
    timing_trials: int = 100
    timing_budget_s: float = 20.0
    # every build of one evaluation together (engine.eval.build.failures); past it the verdict is compile_error
    build_budget_s: float = 180.0
    seed: int = 42
    sandbox: SandboxMode = "auto"
    workers: WorkerStart = "auto"
    # re-check correctness at perturbed sizes (engine.eval.shapes); evalset and bench do unless --no-shapes
    shapes: bool = False
    # torch.compile modes timed beside eager for each correct kernel ("default", "max-autotune"):
    # engine.eval.baselines. Eager stays the headline speedup.
    compile_baselines: list[str] = field(default_factory=list)
    tolerances: dict[str, float] = field(default_factory=dict)
    timeouts: TimeoutsConfig = field(default_factory=TimeoutsConfig)


@dataclass
class ProfileConfig:
    enabled: bool = True
    metrics: MetricSet | list[str] = "default"  # a set name or a list of NCU metric names


@dataclass
class UIConfig:
    theme: str = "default"  # "default" or a theme name (themes/catalog.py); a palette choice is remembered
    keymap: dict[str, str] = field(default_factory=dict)  # binding id -> keys, e.g. "app.quit" = "ctrl+q"


@dataclass
class SessionsConfig:
    dir: str = ""  # empty: the default sessions root (sessions/paths.py)


@dataclass
class GuardConfig:
    """``[guard]``: the policy (``engine.guard.policy``) and per-rule changes, by rule id."""

    policy: GuardPolicy = "default"  # default (KernelBench: PyTorch ops warn) | strict (full replacement)
    relax: list[str] = field(default_factory=list)  # rules turned off (still reported, marked relaxed)
    refuse: list[str] = field(default_factory=list)  # warnings turned into refusals


@dataclass
class Config:
    models: ModelsConfig = field(default_factory=ModelsConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    ui: UIConfig = field(default_factory=UIConfig)
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    #: per-provider settings tables (``engine.llm.settings.ProviderSettings`` fields)
    providers: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: price overrides by ``provider/model`` (``engine.llm.prices``)
    prices: dict[str, dict[str, float]] = field(default_factory=dict)
    #: the files that were read, weakest first (for ``doctor`` and error messages)
    sources: list[str] = field(default_factory=list)

    def provider_settings(self, model_name: str) -> dict[str, Any]:
        """The settings table for the provider of ``model_name`` (empty when none is configured)."""
        provider = model_name.partition("/")[0]
        return dict(self.providers.get(provider, {}))


USER_CONFIG_ENV = "CUDAFORGE_CONFIG"


def user_config_path(env: Mapping[str, str]) -> Path:
    if env.get(USER_CONFIG_ENV):
        return Path(env[USER_CONFIG_ENV]).expanduser()
    xdg = env.get("XDG_CONFIG_HOME", "")
    base = (
        Path(xdg) if xdg and Path(xdg).is_absolute() else Path(env.get("HOME", str(Path.home()))) / ".config"
    )
    return base / "cudaforge" / "config.toml"


def load_config(
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Defaults < user file < project file (``cwd/cudaforge.toml``) < ``overrides``.

    ``overrides`` is a nested mapping shaped like the file (``{"loop": {"rounds": 3}}``); the CLI
    builds it from its flags, so flags are validated by the same rules as files.
    """
    env = os.environ if env is None else env
    cwd = Path.cwd() if cwd is None else Path(cwd)
    config = Config()
    for path in (user_config_path(env), cwd / PROJECT_FILE):
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except tomllib.TOMLDecodeError as error:
                raise ConfigError(f"{path}: not valid TOML: {error}") from None
            except OSError as error:
                raise ConfigError(f"cannot read {path}: {error.strerror}") from None
            _apply(config, data, path.name, [])
            config.sources.append(str(path))
    if overrides:
        _apply(config, overrides, "the command line", [])
    validate(config)
    return config


def sessions_root(config: Config, flag: str | os.PathLike[str] | None = None) -> Path:
    """Where sessions live: ``--sessions-dir``, else ``[sessions] dir``, else the XDG default."""
    from sessions.paths import default_sessions_root

    if flag:
        return Path(flag).expanduser()
    return Path(config.sessions.dir).expanduser() if config.sessions.dir else default_sessions_root()


def _closest(key: str, valid: list[str]) -> str:
    match = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return f"; did you mean '{match[0]}'?" if match else f"; valid keys: {', '.join(valid)}"


def _where(source: str, path: list[str]) -> str:
    return f"{source} [{'.'.join(path)}]" if path else source


def _apply(target: Any, data: Mapping[str, Any], source: str, path: list[str]) -> None:
    """Lay ``data`` over the dataclass ``target`` in place, refusing unknown keys and wrong types."""
    known = {f.name: f for f in fields(target) if f.name != "sources"}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"unknown key '{key}' in {_where(source, path)}{_closest(key, list(known))}")
        current = getattr(target, key)
        where = _where(source, [*path, key])
        if is_dataclass(current):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where} must be a table")
            _apply(current, value, source, [*path, key])
        elif key == "providers":
            _apply_providers(target, value, source)
        elif key == "prices":
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where} must be a table")
            target.prices.update({str(k): dict(v) for k, v in value.items()})
        elif key == "tolerances":
            _apply_tolerances(target, value, source, [*path, key])
        elif key == "keymap":
            if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
                raise ConfigError(f"{where} must be a table of binding id = \"keys\"")
            target.keymap.update({str(k): v for k, v in value.items()})
        else:
            setattr(target, key, _coerce(value, current, where, key))


def _apply_providers(config: Config, value: Any, source: str) -> None:
    from engine.llm.settings import ProviderSettings

    if not isinstance(value, Mapping):
        raise ConfigError(f"{source} [providers] must be a table")
    valid = [f.name for f in fields(ProviderSettings)]
    for name, table in value.items():
        if name not in PROVIDER_NAMES:
            raise ConfigError(
                f"unknown provider '{name}' in {source} [providers]{_closest(name, list(PROVIDER_NAMES))}"
            )
        if not isinstance(table, Mapping):
            raise ConfigError(f"{source} [providers.{name}] must be a table")
        for key in table:
            if key not in valid:
                raise ConfigError(f"unknown key '{key}' in {source} [providers.{name}]{_closest(key, valid)}")
        merged = {**config.providers.get(name, {}), **table}
        try:
            ProviderSettings.from_mapping(merged)
        except Exception as error:  # the provider's own validation message
            raise ConfigError(f"{source} [providers.{name}]: {error}") from None
        config.providers[name] = merged


def _apply_tolerances(target: EvalConfig, value: Any, source: str, path: list[str]) -> None:
    where = _where(source, path)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a table of dtype = tolerance")
    for dtype, tol in value.items():
        if dtype not in DTYPES:
            raise ConfigError(f"unknown key '{dtype}' in {where}{_closest(dtype, list(DTYPES))}")
        target.tolerances[dtype] = _coerce(tol, 0.0, f"{where}.{dtype}", dtype)


#: a setting's kind in words, for "[loop] rounds must be an integer, not 'x'"
_KIND = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _coerce(value: Any, current: Any, where: str, key: str) -> Any:
    """Check a scalar against the type of its default; ints are accepted where floats are."""
    if key == "metrics":
        if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return value
        raise ConfigError(f"{where} must be a metric set name or a list of metric names")
    if isinstance(current, bool):
        ok = isinstance(value, bool)
    elif isinstance(current, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(current, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(current, str):
        ok = isinstance(value, str)
    else:
        ok = True
    if not ok:
        raise ConfigError(f"{where} must be {_KIND.get(type(current), type(current).__name__)}, not {value!r}")
    return value


def validate(config: Config) -> None:
    """Check the values whose type alone does not make them valid."""

    def choice(value: str, allowed: tuple[str, ...], where: str) -> None:
        if value not in allowed:
            raise ConfigError(
                f"{where} is {value!r}; use one of {', '.join(allowed)}{_closest(value, list(allowed))}"
            )

    choice(config.loop.approval, APPROVAL_POLICIES, "[loop] approval")
    choice(config.eval.device, DEVICES, "[eval] device")
    choice(config.eval.sandbox, SANDBOX_MODES, "[eval] sandbox")
    choice(config.eval.workers, WORKER_STARTS, "[eval] workers")
    if config.loop.rounds < 0:
        raise ConfigError("[loop] rounds must be >= 0")
    if config.loop.repeat_asks < 0 or config.loop.retime_within < 0:
        raise ConfigError("[loop] repeat_asks and retime_within must be >= 0")
    if config.eval.trials < 1 or config.eval.timing_trials < 1:
        raise ConfigError("[eval] trials and timing_trials must be at least 1")
    if isinstance(config.profile.metrics, str):
        choice(config.profile.metrics, METRIC_SETS, "[profile] metrics")
    for role in ("coder", "judge"):
        name = getattr(config.models, role)
        provider, sep, model = name.partition("/")
        if not sep or not model or provider not in (*PROVIDER_NAMES, "scripted"):
            raise ConfigError(
                f"[models] {role} = {name!r}: name it provider/model, provider one of openai, anthropic, scripted"
            )
    for name, value in vars(config.eval.timeouts).items():
        if value <= 0:
            raise ConfigError(f"[eval.timeouts] {name} must be positive")
    unknown = [m for m in config.eval.compile_baselines if m not in COMPILE_MODES]
    if unknown:
        raise ConfigError(
            f"[eval] compile_baselines has {unknown[0]!r}; use any of {', '.join(COMPILE_MODES)}"
        )
    _validate_guard(config.guard)


def _validate_guard(guard: GuardConfig) -> None:
    """An unknown policy or rule id in ``[guard]`` is an error naming the valid ones (the names come from
    ``engine.guard.rules``, which imports nothing: the TUI's first frame does not load the guard)."""
    if guard.policy not in GUARD_POLICIES:
        raise ConfigError(f"[guard] policy is {guard.policy!r}; use one of {', '.join(GUARD_POLICIES)}")
    try:
        check_rule_ids(guard.relax)
        check_rule_ids(guard.refuse)
    except GuardPolicyError as error:
        raise ConfigError(f"[guard] {error}") from None
