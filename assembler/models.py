"""Which token encoding counts for a model (setting ``model``).

OpenAI's models map to their tokenizer through tiktoken's own table
(``tiktoken.model.encoding_name_for_model``): gpt-4o, gpt-4.1, o1/o3/o4 and gpt-5 to
``o200k_base``; gpt-4 and gpt-3.5 to ``cl100k_base``. Anthropic publishes no local
tokenizer for Claude, so a ``claude-*`` model is counted with ``ESTIMATE_ENCODING`` and
its counts are estimates: the assembly's ``tokens.methods`` say ``estimate:...``, and an
audit compares them with what the provider billed (``usage.reported``).
"""

from __future__ import annotations

from dataclasses import dataclass

ESTIMATE_ENCODING = "cl100k_base"
"""The encoding that estimates a model without a local tokenizer (Claude)."""
ESTIMATED_PREFIXES: tuple[str, ...] = ("claude-",)
"""Model names counted by estimate."""
CLAUDE_CODE_ALIASES: tuple[str, ...] = ("default", "sonnet", "opus", "haiku", "opusplan")
"""The names Claude Code's own ``model`` setting takes (``sonnet[1m]`` too): Claude models,
so counted by estimate like ``claude-*``."""
ESTIMATE_METHOD_PREFIX = "estimate:"
"""What ``tokens.methods`` of an estimated count start with."""
EXAMPLE_MODELS = ("gpt-5", "gpt-4.1", "gpt-4o", "o1", "o3", "o4-mini", "gpt-4",
                  "gpt-3.5-turbo", "claude-*", "sonnet", "opus", "haiku")


@dataclass(frozen=True, slots=True)
class ModelEncoding:
    """How a model's tokens are counted."""

    model: str
    encoding: str
    estimate: bool
    """True when ``encoding`` only approximates the model's own tokenizer."""


def is_estimated(model: str) -> bool:
    """Whether ``model`` has no local tokenizer (its counts are estimates)."""
    return (model.startswith(ESTIMATED_PREFIXES)
            or model.split("[", 1)[0] in CLAUDE_CODE_ALIASES)


def encoding_for_model(model: str) -> ModelEncoding:
    """The encoding that counts ``model``'s tokens; ``ValueError`` (one line, the known
    families listed) for a model no table knows."""
    if is_estimated(model):
        return ModelEncoding(model, ESTIMATE_ENCODING, estimate=True)
    from tiktoken.model import encoding_name_for_model  # a plain table, fetches nothing

    try:
        return ModelEncoding(model, encoding_name_for_model(model), estimate=False)
    except KeyError:
        raise ValueError(f"unknown model {model!r} (known: "
                         f"{', '.join(EXAMPLE_MODELS)} and their dated versions)") from None
