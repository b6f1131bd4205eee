"""Block-level verification: tree verifiers, exact block efficiency on small sequence models,
and the block-level optimum.

A **tree verifier** takes one draft tree (:class:`DraftTree`) and returns the accepted path
and the next token; registered by name (:func:`get_verifier`):

* ``token:<scheme>`` -- the node-by-node walk with any registered token scheme
  (:class:`TokenVerifier`; ``token:optimal`` is the token-level optimal verifier);
* ``block`` -- block verification of one draft (Sun et al., ICLR 2025, Algorithm 2);
* ``traversal`` -- traversal verification (Weng et al., NeurIPS 2025), iid trees and trees
  drafted without replacement at the root.

On a small :class:`SequenceModel` (next-token tables up to depth L), :func:`evaluate` gives a
verifier's exact E[τ] and proves block losslessness by enumerating every draft tree, and
:func:`block_optimum` the largest E[τ] any lossless verifier can reach (a certified LP; second
route :func:`tail_optimum`, closed form for one draft :func:`single_path_optimum`). The LP
imports cvxpy only when called; torch is imported only by ``verify_batch``.

>>> [name for name in verifier_names() if not name.startswith("token:")]
['block', 'traversal']
>>> get_verifier("token:specinfer")
TokenVerifier(SpecInfer())
"""

from __future__ import annotations

from multidraft.trees.base import BatchVerification, TreeLaw, TreeVerifier, Verification
from multidraft.trees.block import BlockVerification
from multidraft.trees.exact import BlockEvaluation, evaluate
from multidraft.trees.model import SequenceModel, sun_example
from multidraft.trees.optimum import BlockOptimum, block_optimum, single_path_optimum, tail_optimum, tree_classes
from multidraft.trees.token import TokenVerifier
from multidraft.trees.traversal import Traversal
from multidraft.trees.tree import DraftTree, TreeNodes

__all__ = [
    "DraftTree",
    "TreeNodes",
    "TreeVerifier",
    "TreeLaw",
    "Verification",
    "BatchVerification",
    "TokenVerifier",
    "BlockVerification",
    "Traversal",
    "SequenceModel",
    "sun_example",
    "BlockEvaluation",
    "evaluate",
    "BlockOptimum",
    "block_optimum",
    "tail_optimum",
    "single_path_optimum",
    "tree_classes",
    "VERIFIERS",
    "get_verifier",
    "verifier_names",
]

#: Tree verifier classes by registry name (the token walk is ``token:<scheme>``).
VERIFIERS: dict[str, type[TreeVerifier]] = {cls.name: cls for cls in (BlockVerification, Traversal)}


def verifier_names() -> list[str]:
    """Every registered verifier name: ``token:<scheme>`` for each registered scheme, then the
    block-level verifiers."""
    from multidraft.schemes import SCHEMES

    return [f"token:{name}" for name in SCHEMES] + list(VERIFIERS)


def get_verifier(name: str, **options: object) -> TreeVerifier:
    """The verifier registered as ``name`` (exact names only); for ``token:<scheme>`` the
    ``options`` go to the scheme.

    >>> get_verifier("traversal")
    Traversal()
    >>> get_verifier("token:rrs")
    Traceback (most recent call last):
    ...
    ValueError: verifier: unknown scheme 'rrs' in 'token:rrs'; choose one of single, specinfer, rrs-wor, spectr, is-lp, truncated-lp, multistage, optimal, deterministic, greedy
    """
    if not isinstance(name, str):
        raise ValueError(f"verifier: expected a name, got {type(name).__name__}")
    if name.startswith("token:"):
        from multidraft.schemes import SCHEMES, get_scheme

        scheme = name[len("token:") :]
        if scheme not in SCHEMES:
            raise ValueError(f"verifier: unknown scheme {scheme!r} in {name!r}; choose one of {', '.join(SCHEMES)}")
        return TokenVerifier(get_scheme(scheme, **options))
    if name not in VERIFIERS:
        raise ValueError(f"verifier: unknown name {name!r}; choose one of {', '.join(verifier_names())}")
    if options:
        raise ValueError(f"verifier {name!r}: takes no options, got {sorted(options)}")
    return VERIFIERS[name]()
