"""Real language models: loading, multi-draft drafting, block verification along the tree of
drafts, and the measurement of empirical acceptance beside the theory's numbers.

Imports torch and transformers (the ``decoding`` extra). The public face:
:func:`load_model`, :func:`early_exit`, :class:`DraftSpec`, :func:`speculative_generate`,
:func:`sample_autoregressive`, :func:`measure` and its :class:`Results`.
"""

from multidraft.decoding.drafting import DraftSpec, Drafts, ModelState, draft_block, process_logits, sample_tokens
from multidraft.decoding.measurement import (
    DEFAULT_PROMPTS,
    Generation,
    PositionRecord,
    Results,
    encode_prompt,
    measure,
    node_optimal_acceptance,
    sample_autoregressive,
    speculative_generate,
)
from multidraft.decoding.models import (
    LoadedModel,
    check_compatible,
    default_cache_dir,
    default_model_path,
    early_exit,
    load_model,
    resolve_device,
)
from multidraft.decoding.verification import BlockOutcome, NodeStep, node_law, verify_block, walk_tree

__all__ = [
    "LoadedModel",
    "default_model_path",
    "default_cache_dir",
    "resolve_device",
    "load_model",
    "early_exit",
    "check_compatible",
    "DraftSpec",
    "Drafts",
    "ModelState",
    "process_logits",
    "sample_tokens",
    "draft_block",
    "verify_block",
    "node_law",
    "walk_tree",
    "NodeStep",
    "BlockOutcome",
    "DEFAULT_PROMPTS",
    "PositionRecord",
    "Generation",
    "Results",
    "encode_prompt",
    "node_optimal_acceptance",
    "speculative_generate",
    "sample_autoregressive",
    "measure",
]
