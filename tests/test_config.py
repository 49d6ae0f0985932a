"""Configuration: defaults < user file < project file < flags; every key checked, typos explained."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.approval import needs_human
from engine.config import Config, ConfigError, load_config, user_config_path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    project = tmp_path / "project"
    project.mkdir()
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    return project, env


def test_defaults_without_files(dirs) -> None:
    project, env = dirs
    config = load_config(project, env)
    assert config.loop.rounds == 10 and config.loop.approval == "ask"
    assert config.eval.trials == 5 and config.eval.device == "auto"
    assert config.sources == []


def test_project_file_beats_user_file_and_flags_beat_both(dirs) -> None:
    project, env = dirs
    user = write(
        user_config_path(env), '[loop]\nrounds = 4\napproval = "auto"\n[models]\ncoder = "anthropic/x"\n'
    )
    write(project / "cudaforge.toml", "[loop]\nrounds = 6\n[eval.timeouts]\nbuild = 30\n")
    config = load_config(project, env)
    assert config.loop.rounds == 6  # project wins
    assert config.loop.approval == "auto"  # kept from the user file
    assert config.models.coder == "anthropic/x"
    assert config.eval.timeouts.build == 30.0 and config.eval.timeouts.check == 300.0
    assert config.sources == [str(user), str(project / "cudaforge.toml")]
    flagged = load_config(project, env, {"loop": {"rounds": 2}})
    assert flagged.loop.rounds == 2


def test_xdg_falls_back_to_home_config(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    assert user_config_path(env) == tmp_path / ".config" / "cudaforge" / "config.toml"


def test_unknown_key_suggests_the_closest(dirs) -> None:
    project, env = dirs
    write(project / "cudaforge.toml", "[loop]\nrouns = 3\n")
    with pytest.raises(
        ConfigError, match=r"unknown key 'rouns' in cudaforge.toml \[loop\]; did you mean 'rounds'\?"
    ):
        load_config(project, env)


def test_unknown_table_and_provider_key_are_refused(dirs) -> None:
    project, env = dirs
    write(project / "cudaforge.toml", "[lopo]\nrounds = 3\n")
    with pytest.raises(ConfigError, match="did you mean 'loop'"):
        load_config(project, env)
    write(project / "cudaforge.toml", '[providers.openai]\nbase_ulr = "http://127.0.0.1:8000/v1"\n')
    with pytest.raises(ConfigError, match=r"\[providers.openai\]; did you mean 'base_url'"):
        load_config(project, env)


def test_provider_tables_and_tolerances(dirs) -> None:
    project, env = dirs
    write(
        project / "cudaforge.toml",
        '[providers.openai]\nbase_url = "http://127.0.0.1:8000/v1"\napi_key_env = "MY_KEY"\n'
        "[eval.tolerances]\nfloat32 = 1e-3\n",
    )
    config = load_config(project, env)
    assert config.provider_settings("openai/o3") == {
        "base_url": "http://127.0.0.1:8000/v1",
        "api_key_env": "MY_KEY",
    }
    assert config.provider_settings("anthropic/claude") == {}
    assert config.eval.tolerances == {"float32": 1e-3}
    write(project / "cudaforge.toml", "[eval.tolerances]\nflaot32 = 1e-3\n")
    with pytest.raises(ConfigError, match="did you mean 'float32'"):
        load_config(project, env)


def test_wrong_types_and_values_are_explained(dirs) -> None:
    project, env = dirs
    write(project / "cudaforge.toml", '[loop]\nrounds = "ten"\n')
    with pytest.raises(ConfigError, match=r"\[loop.rounds\] must be an integer, not 'ten'"):
        load_config(project, env)
    write(project / "cudaforge.toml", '[loop]\napproval = "ask_if_flagged"\n')
    with pytest.raises(ConfigError, match="did you mean 'ask-if-flagged'"):
        load_config(project, env)
    write(project / "cudaforge.toml", '[models]\ncoder = "o3"\n')
    with pytest.raises(ConfigError, match="provider/model"):
        load_config(project, env)
    write(project / "cudaforge.toml", "[loop\nrounds = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(project, env)


def test_flags_are_checked_like_files(dirs) -> None:
    project, env = dirs
    with pytest.raises(ConfigError, match="the command line"):
        load_config(project, env, {"loop": {"roundz": 1}})


def test_bundled_default_file_matches_the_defaults(dirs) -> None:
    from importlib import resources

    from engine.config import tomllib

    project, env = dirs
    text = resources.files("engine.data").joinpath("default_config.toml").read_text()
    write(project / "cudaforge.toml", text)
    assert load_config(project, env).loop == Config().loop
    loaded = load_config(project, env)
    loaded.sources = []
    assert loaded == Config()
    assert set(tomllib.loads(text)) >= {"models", "loop", "eval", "profile", "ui"}


@pytest.mark.parametrize(
    ("policy", "flags", "expected"),
    [
        ("ask", [], True),
        ("auto", ["kernel-not-called"], False),
        ("ask-if-flagged", [], False),
        ("ask-if-flagged", ["kernel-not-called"], True),
    ],
)
def test_approval_policies(policy: str, flags: list[str], expected: bool) -> None:
    assert needs_human(policy, {"status": "correct", "flags": flags}) is expected
