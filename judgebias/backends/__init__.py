"""Model backends behind one protocol (see ``protocol``)."""

from judgebias.backends.protocol import (
    AttentionSummary,
    Backend,
    Generation,
    GenerationParams,
    Message,
    OptionScores,
    Prompt,
    TokenLogprobs,
)

__all__ = ["AttentionSummary", "Backend", "Generation", "GenerationParams", "Message", "OptionScores",
           "Prompt", "TokenLogprobs"]
