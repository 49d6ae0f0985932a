"""Cost of a call from its token usage and a per-million-token price table.

The table ships as ``engine/data/prices.toml`` and can be overridden from the config file
(``[prices."openai/o3"] input = .. output = ..``). A model with no price gets ``None`` — the UI
shows its tokens and "cost unknown" rather than a guess.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from engine.llm.base import Usage
from engine.llm.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_DATE_SUFFIX = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2})$")


@dataclass(frozen=True)
class Price:
    """USD per million tokens. ``cached_input`` None: cached tokens cost ``input`` (an upper bound)."""

    input: float
    output: float
    cached_input: float | None = None

    def cost(self, usage: Usage) -> float:
        cached = min(usage.cached_tokens, usage.input_tokens)
        fresh = usage.input_tokens - cached
        cached_rate = self.input if self.cached_input is None else self.cached_input
        return (fresh * self.input + cached * cached_rate + usage.output_tokens * self.output) / 1_000_000


def _parse_price(name: str, entry: Any) -> Price:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"price for {name!r} must be a table with input and output")
    unknown = set(entry) - {"input", "output", "cached_input"}
    if unknown or "input" not in entry or "output" not in entry:
        raise ConfigError(
            f"price for {name!r} needs input and output (USD per million tokens), and nothing else"
        )
    try:
        values = {k: float(v) for k, v in entry.items()}
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"price for {name!r} must be numbers") from exc
    if any(v < 0 for v in values.values()):
        raise ConfigError(f"price for {name!r} cannot be negative")
    return Price(**values)


class PriceTable:
    """Prices by ``provider/model``; dated snapshot names fall back to their alias."""

    def __init__(self, prices: Mapping[str, Price]) -> None:
        self._prices = dict(prices)

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None) -> PriceTable:
        """The bundled table with ``overrides`` (a config ``[prices]`` table) laid over it."""
        text = resources.files("engine.data").joinpath("prices.toml").read_text(encoding="utf-8")
        raw: dict[str, Any] = dict(tomllib.loads(text))
        raw.update(overrides or {})
        return cls({name: _parse_price(name, entry) for name, entry in raw.items()})

    def lookup(self, model_name: str) -> Price | None:
        """Find the price of ``provider/model``; ``None`` when unknown."""
        if model_name in self._prices:
            return self._prices[model_name]
        undated = _DATE_SUFFIX.sub("", model_name)
        for candidate in (undated, undated + "-0"):
            if candidate in self._prices:
                return self._prices[candidate]
        return None

    def cost(self, model_name: str, usage: Usage) -> float | None:
        price = self.lookup(model_name)
        return None if price is None else round(price.cost(usage), 8)

    def __contains__(self, model_name: str) -> bool:
        return self.lookup(model_name) is not None

    def names(self) -> list[str]:
        return sorted(self._prices)
