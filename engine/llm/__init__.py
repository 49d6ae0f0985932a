"""LLM providers behind one small interface (see ``base.Provider``).

``make_provider("openai/o3", settings)`` returns a provider whose ``complete(request, on_token,
cancel)`` gives an ``LLMReply`` with text, thinking, usage, latency and cost. Implementations:
OpenAI (and any OpenAI-compatible server), Anthropic, and scripted replies from a directory.
"""

from engine.llm.base import LLMReply, LLMRequest, Message, Provider, Usage
from engine.llm.errors import LLMCancelled, LLMError
from engine.llm.prices import PriceTable
from engine.llm.registry import make_provider, parse_model_name
from engine.llm.settings import ProviderSettings

__all__ = [
    "LLMCancelled",
    "LLMError",
    "LLMReply",
    "LLMRequest",
    "Message",
    "PriceTable",
    "Provider",
    "ProviderSettings",
    "Usage",
    "make_provider",
    "parse_model_name",
]
