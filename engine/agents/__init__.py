"""The Coder and Judge agents: prompt builders (templates in ``templates/``), reply parsers,
the ``Suggestion`` data, transcript records, and the two roles tying them to a provider."""

from engine.agents.parse import KernelExtraction, extract_kernel, parse_suggestion, strip_thinking
from engine.agents.prompts import Prompt
from engine.agents.roles import Coder, CoderTurn, Judge, JudgeTurn
from engine.agents.suggestion import Suggestion
from engine.agents.transcript import transcript_record

__all__ = [
    "Coder",
    "CoderTurn",
    "Judge",
    "JudgeTurn",
    "KernelExtraction",
    "Prompt",
    "Suggestion",
    "extract_kernel",
    "parse_suggestion",
    "strip_thinking",
    "transcript_record",
]
