"""Real language models: loading, multi-draft drafting, block verification along the tree of
drafts, and the measurement of empirical acceptance beside the theory's numbers.

Imports torch and transformers (the ``decoding`` extra). The public face:
:func:`load_model`, :func:`early_exit`, :class:`Sampling`, :class:`DraftSpec`,
:func:`speculative_generate` (K chains, or a tree of any :class:`~multidraft.trees.TreeShape`:
:func:`draft_tree`), :func:`sample_autoregressive`, :func:`measure` with its
:class:`MeasureConfig` and :class:`Results`; prompt sets (:func:`read_prompts`,
:func:`bundled_prompts`, :func:`dataset_prompts`) and runs sharded over torchrun's processes
(:func:`run_sharded`).
"""

from multidraft.decoding.config import DEFAULT_PROMPTS, MeasureConfig
from multidraft.decoding.drafting import (
    DraftSpec,
    Drafts,
    Sampling,
    draft_block,
    process_logits,
    sample_tokens,
    sample_without_replacement,
)
from multidraft.decoding.generation import Generation, sample_autoregressive, speculative_generate, warm_up
from multidraft.decoding.measurement import encode_prompt, measure, node_optimal_acceptance, run_measurement
from multidraft.decoding.models import (
    LoadedModel,
    check_compatible,
    default_cache_dir,
    default_model_path,
    early_exit,
    end_of_sequence_ids,
    load_model,
    resolve_device,
)
from multidraft.decoding.prompts import PromptSet, bundled_prompts, dataset_prompts, read_prompts
from multidraft.decoding.results import TIMING_FIELDS, PositionRecord, Results, difference_interval
from multidraft.decoding.sharding import run_sharded
from multidraft.decoding.state import ModelState
from multidraft.decoding.tree_drafting import TreeDraft, draft_tree, tree_targets
from multidraft.decoding.verification import (
    BlockOutcome,
    NodeStep,
    node_law,
    node_law_class,
    node_scheme,
    spec_groups,
    verify_block,
    verify_shaped,
    verify_tree,
    walk_tree,
)

__all__ = [
    "LoadedModel",
    "default_model_path",
    "default_cache_dir",
    "resolve_device",
    "load_model",
    "early_exit",
    "check_compatible",
    "end_of_sequence_ids",
    "Sampling",
    "DraftSpec",
    "Drafts",
    "ModelState",
    "process_logits",
    "sample_tokens",
    "sample_without_replacement",
    "draft_block",
    "TreeDraft",
    "draft_tree",
    "tree_targets",
    "verify_block",
    "verify_shaped",
    "node_law",
    "node_law_class",
    "node_scheme",
    "walk_tree",
    "verify_tree",
    "spec_groups",
    "NodeStep",
    "BlockOutcome",
    "Generation",
    "speculative_generate",
    "sample_autoregressive",
    "warm_up",
    "DEFAULT_PROMPTS",
    "MeasureConfig",
    "PositionRecord",
    "Results",
    "TIMING_FIELDS",
    "difference_interval",
    "encode_prompt",
    "node_optimal_acceptance",
    "measure",
    "run_measurement",
    "run_sharded",
    "PromptSet",
    "read_prompts",
    "bundled_prompts",
    "dataset_prompts",
]
