"""The block-level gap on one small sequence model: token-level SpecInfer, the token-level optimal
verifier and the tree verifiers against the certified block-level optimum, on the same trees.

For verifier V with exact E_V[τ] (:func:`~multidraft.trees.evaluate`), baseline B (token-level
SpecInfer: ``token:specinfer`` for iid trees, its without-replacement form ``token:rrs-wor``
otherwise) and the block optimum O (:func:`~multidraft.trees.block_optimum`), the **gap
closed** by V is ``(E_V - E_B) / (O - E_B)``: 0 for the baseline, 1 at the optimum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from multidraft.trees.exact import evaluate
from multidraft.trees.model import SequenceModel
from multidraft.trees.optimum import block_optimum
from multidraft.trees.registry import get_verifier

__all__ = ["BlockGapRow", "block_gap", "GAP_VERIFIERS"]

#: The verifiers compared by default (the baseline first; ``token:specinfer`` stands for
#: ``token:rrs-wor`` on trees drafted without replacement).
GAP_VERIFIERS = ("token:specinfer", "token:optimal", "traversal", "selective")


@dataclass(frozen=True)
class BlockGapRow:
    """One instance of the block-level gap table.

    Attributes
    ----------
    instance : str
        A label of the model.
    n, length, k : int
    without_replacement : bool
    expected : dict
        ``{verifier name: exact E[τ]}`` (a Fraction where the verifier is exact).
    optimum, optimum_upper : float
        The block optimum (primal value) and its certified upper bound.
    deviations : dict
        ``{verifier name: largest deviation from the target's joint law}`` (the losslessness
        check of each evaluation).
    """

    instance: str
    n: int
    length: int
    k: int
    without_replacement: bool
    expected: dict = field(default_factory=dict)
    optimum: float = math.nan
    optimum_upper: float | Fraction = math.nan
    deviations: dict = field(default_factory=dict)

    @property
    def baseline(self) -> str:
        """The token-level SpecInfer verifier of this drafting."""
        return "token:rrs-wor" if self.without_replacement else "token:specinfer"

    def closed(self, name: str) -> float:
        """``(E_V - E_B) / (O - E_B)`` (NaN when the baseline is already optimal)."""
        base = float(self.expected[self.baseline])
        gap = self.optimum - base
        return (float(self.expected[name]) - base) / gap if gap > 1e-9 else math.nan

    def as_dict(self) -> dict:
        """JSON-ready: values as floats, plus the gap closed by every verifier."""
        return {
            "instance": self.instance,
            "n": self.n,
            "length": self.length,
            "k": self.k,
            "drafting": "wor" if self.without_replacement else "iid",
            "expected_accepted": {name: float(value) for name, value in self.expected.items()},
            "block_optimum": self.optimum,
            "block_optimum_upper_bound": float(self.optimum_upper),
            "gap_closed": {name: self.closed(name) for name in self.expected},
            "max_deviation": max(float(d) for d in self.deviations.values()),
        }


def block_gap(
    model: SequenceModel,
    k: int,
    *,
    without_replacement: bool = False,
    verifiers: Sequence[str] = GAP_VERIFIERS,
    instance: str = "",
) -> BlockGapRow:
    """Exact E[τ] of each verifier and the certified block optimum on ``model`` (K = ``k``).

    >>> from multidraft.trees import sun_example
    >>> row = block_gap(sun_example(), 2, verifiers=("token:specinfer", "traversal"))
    >>> row.expected["token:specinfer"], row.expected["traversal"], round(row.optimum, 6)
    (Fraction(4, 3), Fraction(115, 81), 1.617284)
    >>> round(row.closed("traversal"), 4)  # (115/81 - 4/3) / (131/81 - 4/3) = 7/23
    0.3043
    """
    names = ["token:rrs-wor" if (name == "token:specinfer" and without_replacement) else name for name in verifiers]
    row = BlockGapRow(instance, model.n, model.length, k, without_replacement)
    for name in names:
        verifier = get_verifier(name)  # Fractions where both the model and the verifier allow them
        result = evaluate(verifier, model, k, without_replacement=without_replacement, exact=model.exact and verifier.exact_capable)
        row.expected[name] = result.expected_accepted
        row.deviations[name] = result.deviation
    optimum = block_optimum(model, k, without_replacement=without_replacement, progress=False)
    return BlockGapRow(
        instance, model.n, model.length, k, without_replacement, row.expected, optimum.value, optimum.upper_bound, row.deviations
    )
