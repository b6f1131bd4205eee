"""Block-level verification: tree verifiers, exact block efficiency on small sequence models,
and the block-level optimum.

A **tree verifier** takes one draft tree (:class:`DraftTree`) and returns the accepted path
and the next token; registered by name (:func:`get_verifier`):

* ``token:<scheme>`` -- the node-by-node walk with any registered token scheme
  (:class:`TokenVerifier`; ``token:optimal`` is the token-level optimal verifier);
* ``block`` -- block verification of one draft (Sun et al., ICLR 2025, Algorithm 2);
* ``traversal`` -- traversal verification (Weng et al., NeurIPS 2025), iid trees and trees
  drafted without replacement at the root;
* ``selective`` -- selective block verification (new here): the token-level optimal selection
  of one child at every node, with block verification's budgets along the path.

Trees as drafters build them: a :class:`TreeShape` (``chains``, ``expansion``, ``static``
parent arrays, ``dynamic`` budgeted top-k) with a per-node law (``"iid"``,
``"without-replacement"``, ``"top-k"``); a tree of a non-chain shape is a :class:`ShapedTree`,
and :func:`evaluate`, :func:`block_optimum` and :func:`tail_optimum` take a shape wherever they
take K. :func:`downstream_value` and :class:`DownstreamWalk`: the downstream-aware walk on iid
chains (a reference that knows the model).

Which tree for a node budget: :func:`sequoia_tree` (Sequoia's dynamic programme over shapes from
positional acceptance, :func:`positional_acceptance`, :func:`positional_value`) and
:func:`budget_search` (the exact best shape per family on a small sequence model).

On a small :class:`SequenceModel` (next-token tables up to depth L), :func:`evaluate` gives a
verifier's exact E[τ] and proves block losslessness by enumerating every draft tree, and
:func:`block_optimum` the largest E[τ] any lossless verifier can reach (a certified LP; second
route :func:`tail_optimum`, closed form for one draft :func:`single_path_optimum`). The LP
imports cvxpy only when called; torch is imported only by ``verify_batch``.

>>> [name for name in verifier_names() if not name.startswith("token:")]
['block', 'traversal', 'selective']
>>> get_verifier("token:specinfer")
TokenVerifier(SpecInfer())
"""

from __future__ import annotations

from multidraft.trees.base import BatchVerification, TreeLaw, TreeVerifier, Verification
from multidraft.trees.block import BlockVerification
from multidraft.trees.budget import BudgetTree, positional_acceptance, positional_value, sequoia_tree
from multidraft.trees.budget_search import ShapeScore, budget_search
from multidraft.trees.downstream import DownstreamWalk, downstream_value
from multidraft.trees.exact import BlockEvaluation, evaluate
from multidraft.trees.gap import GAP_VERIFIERS, BlockGapRow, block_gap
from multidraft.trees.model import SequenceModel, sun_example
from multidraft.trees.optimum import BlockOptimum, block_optimum, single_path_optimum, tail_optimum, tree_classes
from multidraft.trees.registry import VERIFIERS, get_verifier, verifier_names
from multidraft.trees.selective import Selective
from multidraft.trees.shape import TreeShape
from multidraft.trees.shaped import ShapedTree, shape_trees
from multidraft.trees.token import TokenVerifier
from multidraft.trees.traversal import Traversal
from multidraft.trees.tree import DraftTree, TreeNodes
from multidraft.trees.tree_only import TreeOnlyBound, tree_only_bound

__all__ = [
    "DraftTree",
    "TreeNodes",
    "TreeShape",
    "ShapedTree",
    "shape_trees",
    "TreeVerifier",
    "TreeLaw",
    "Verification",
    "BatchVerification",
    "TokenVerifier",
    "BlockVerification",
    "Traversal",
    "Selective",
    "SequenceModel",
    "sun_example",
    "BlockEvaluation",
    "evaluate",
    "BlockOptimum",
    "block_optimum",
    "tail_optimum",
    "single_path_optimum",
    "tree_classes",
    "BlockGapRow",
    "block_gap",
    "GAP_VERIFIERS",
    "DownstreamWalk",
    "downstream_value",
    "TreeOnlyBound",
    "tree_only_bound",
    "BudgetTree",
    "sequoia_tree",
    "positional_acceptance",
    "positional_value",
    "ShapeScore",
    "budget_search",
    "VERIFIERS",
    "get_verifier",
    "verifier_names",
]
