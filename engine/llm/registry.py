"""Make a provider from a ``provider/model`` name: ``openai/o3``, ``anthropic/claude-sonnet-4-5``,
``scripted/DIR``. Only the first slash splits, so ``openai/Qwen/Qwen3-32B`` (a model served by
vLLM) and ``scripted//abs/path`` work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.llm.base import Provider
from engine.llm.errors import UnknownModelError
from engine.llm.prices import PriceTable
from engine.llm.settings import ProviderSettings

PROVIDERS = ("openai", "anthropic", "scripted")


def parse_model_name(name: str) -> tuple[str, str]:
    """Split ``provider/model``; raise ``UnknownModelError`` with the accepted forms otherwise."""
    provider, sep, model = name.strip().partition("/")
    if not sep or not model or provider not in PROVIDERS:
        raise UnknownModelError(
            f"unknown model {name!r}: name it provider/model with provider one of "
            f"{', '.join(PROVIDERS)} (e.g. openai/o3, anthropic/claude-sonnet-4-5, scripted/DIR)"
        )
    return provider, model


def make_provider(
    name: str,
    settings: ProviderSettings | Mapping[str, Any] | None = None,
    prices: PriceTable | Mapping[str, Any] | None = None,
) -> Provider:
    """Build the provider for ``name``. ``settings`` may be a config table; ``prices`` a config
    ``[prices]`` table laid over the bundled price list (or a ready ``PriceTable``)."""
    provider, model = parse_model_name(name)
    if not isinstance(settings, ProviderSettings):
        settings = ProviderSettings.from_mapping(settings)
    table = prices if isinstance(prices, PriceTable) else PriceTable.load(prices)
    if provider == "scripted":
        from engine.llm.scripted import ScriptedProvider

        return ScriptedProvider(model)
    if provider == "openai":
        from engine.llm.openai_provider import OpenAIProvider

        return OpenAIProvider(model, settings, table)
    from engine.llm.anthropic_provider import AnthropicProvider

    return AnthropicProvider(model, settings, table)
