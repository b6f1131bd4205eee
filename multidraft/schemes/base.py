"""The shared interface of token-level selection schemes and the arithmetic they share.

A **token-level selection scheme** maps the draft tuple X = (X_1, ..., X_K), the target p, the
draft law D and fresh randomness to an output token Y with ``P(Y = y) = p(y)`` exactly
(lossless). Its **acceptance** is ``P(Y ∈ set(X))`` (theory.md, "Notation"): the chance that
the emitted token is one of the drafts, which the optimal acceptance P* bounds from above.

Every scheme answers, with one signature style (DESIGN.md, "The core objects"):

* :meth:`Scheme.acceptance` -- exactly, by closed form where one is published, else by
  enumerating the law's draft tuples (:meth:`Scheme.enumerated_acceptance`, also the second,
  independent route the tests compare a closed form against);
* :meth:`Scheme.conditional_distribution` -- the exact law of Y given each draft tuple;
* :meth:`Scheme.output_distribution` -- ``Σ_x D(x) P(Y = · | X = x)``, the proof of
  losslessness for one case (small n), in :class:`~fractions.Fraction` arithmetic when
  ``exact=True`` and the scheme allows it;
* :meth:`Scheme.select` (one draw) and :meth:`Scheme.sample` (N tuples at once, vectorised; the
  same code path as ``select``), both driven by an explicit :class:`numpy.random.Generator`;
* :meth:`Scheme.select_batch` -- a torch form over a batch of positions for decoding, where the
  scheme provides one (``batch_capable``).

Subclasses implement four hooks: ``_prepare`` (the quantities that do not depend on the drafts),
``_conditional``, ``_sample`` and optionally ``_closed_form``, and state what they are in class
attributes (the laws and K they support, whether they are optimal, for which laws they solve an
LP or run at any vocabulary size), which the registry tests read: a new scheme is tested by
registering it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from multidraft.theory.distributions import as_distribution, as_exact_distribution
from multidraft.theory.laws import DraftLaw, membership
from multidraft.theory.limits import ProblemTooLargeError

__all__ = [
    "Selection",
    "Scheme",
    "LAW_NAMES",
    "positive_part",
    "safe_divide",
    "normalise",
    "sample_rows",
    "sequential_conditional",
    "sequential_sample",
    "single_draft_step",
]

#: ``law.name`` of every draft law in :mod:`multidraft.theory.laws`.
LAW_NAMES = ("iid", "independent", "wor", "greedy", "deterministic")
#: Largest number of entries of the ``[m, n]`` conditional matrix built at once.
_CHUNK_ENTRIES = 4_000_000


@dataclass(frozen=True)
class Selection:
    """The outcome of one run of a scheme.

    Attributes
    ----------
    token : int
        The emitted token Y (distributed exactly as the target).
    accepted : bool
        Whether ``Y ∈ set(X)``.
    position : int or None
        The first draft position holding Y when accepted, else None.
    """

    token: int
    accepted: bool
    position: int | None


# ----------------------------------------------------------------------------------------------
# Arithmetic shared by float64 and exact (object arrays of Fractions) computations.


def positive_part(values: np.ndarray) -> np.ndarray:
    """``(x)_+ = max(x, 0)`` elementwise, for float and Fraction arrays alike."""
    if values.dtype == object:
        return np.array([v if v > 0 else Fraction(0) for v in values.reshape(-1)], dtype=object).reshape(values.shape)
    return np.maximum(values, 0.0)


def safe_divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """``a / b`` where ``b > 0``, else 0 (never evaluates a division by zero)."""
    positive = denominator > 0
    return np.where(positive, numerator / np.where(positive, denominator, 1), 0)


def normalise(weights: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """``w / Σ w`` along the last axis; rows of zero mass become ``fallback`` (broadcast).

    A residual of zero mass is reached with probability zero, so any distribution inside the
    target's support can stand in for it; the callers pass the target or the previous residual.
    """
    mass = weights.sum(axis=-1, keepdims=True)
    return np.where(mass > 0, weights / np.where(mass > 0, mass, 1), fallback)


def single_draft_step(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The single-draft speculative step (Leviathan et al. 2023; Chen et al. 2023): accept a
    draft y ~ q with probability ``min(1, p(y)/q(y))``, else sample ``norm((p - q)_+)``.

    Returns ``(step [n], residual [n])``, in float or Fraction arithmetic like the inputs. The
    output is distributed exactly as p, with acceptance ``Σ_y min(p(y), q(y))``.
    """
    return np.minimum(safe_divide(p, q), 1), normalise(positive_part(p - q), p)


def sample_rows(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row of non-negative ``weights [N, n]`` (each row of positive mass),
    drawn with probability proportional to the row, by inverse CDF.

    The uniform is kept strictly below the row total, and the first index whose cumulative
    sum exceeds it is returned, so an index of weight zero is never drawn.
    """
    weights = np.asarray(weights, dtype=np.float64)
    cumulative = np.cumsum(weights, axis=-1)
    total = cumulative[:, -1:]
    level = np.minimum(rng.random((len(weights), 1)) * total, np.nextafter(total, 0.0))
    return np.sum(cumulative <= level, axis=-1).astype(np.int64)


def sequential_conditional(step: np.ndarray, residual: np.ndarray, tuples: np.ndarray) -> np.ndarray:
    """Law of Y given each tuple for a scheme that tests the drafts in order with acceptance
    probabilities ``step[i, y]`` at position i and falls back to one residual law:

        P(Y = y | x) = Σ_i 1[x_i = y] a_i(x_i) Π_{j<i} (1 - a_j(x_j)) + Π_j (1 - a_j(x_j)) res(y).

    ``step`` is [K, n] (or [n], shared by all positions), ``residual`` [n], ``tuples`` [m, K];
    returns [m, n] in the dtype of the inputs (float or Fraction objects).
    """
    m, k = tuples.shape
    step = np.broadcast_to(step, (k, residual.shape[-1]))
    out = np.zeros((m, residual.shape[-1]), dtype=residual.dtype)
    if residual.dtype == object:
        out[:] = Fraction(0)
    reach = np.ones(m, dtype=residual.dtype)
    rows = np.arange(m)
    for i in range(k):
        accept = step[i][tuples[:, i]]
        out[rows, tuples[:, i]] += reach * accept
        reach = reach * (1 - accept)
    return out + reach[:, None] * residual[None, :]


def sequential_sample(step: np.ndarray, residual: np.ndarray, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Run the sequential test of :func:`sequential_conditional` on ``tuples [N, K]``:
    accept ``x_i`` iff ``U_i < a_i(x_i)`` for the first such i, else draw from the residual."""
    n_rows, k = tuples.shape
    step = np.broadcast_to(np.asarray(step, dtype=np.float64), (k, residual.shape[-1]))
    accept = rng.random((n_rows, k)) < step[np.arange(k)[None, :], tuples]
    first = np.argmax(accept, axis=-1)
    tokens = tuples[np.arange(n_rows), first].copy()
    rejected = ~accept.any(axis=-1)
    if rejected.any():
        tokens[rejected] = rng.choice(len(residual), size=int(rejected.sum()), p=np.asarray(residual, dtype=np.float64))
    return tokens


# ----------------------------------------------------------------------------------------------


class Scheme(ABC):
    """A token-level selection scheme: lossless map from draft tuples to an output token.

    Class attributes
    ----------------
    name : str
        Registry name (``"specinfer"``, ...).
    supported_laws : tuple of str
        ``law.name`` values the scheme accepts.
    k_range : tuple (int, int or None)
        Smallest and largest number of drafts K the scheme accepts (None: no upper bound).
    optimal : bool
        The acceptance equals the optimum P* for every law and K the scheme supports (exactly,
        or up to the LP's tolerance for LP weights).
    lp_laws : tuple of str
        ``law.name`` values for which running the scheme solves a linear program
        (:mod:`multidraft.lp`: float weights, slower per call); empty for LP-free schemes.
    any_vocabulary_laws : tuple of str
        ``law.name`` values for which :meth:`acceptance` and :meth:`select` run at any
        vocabulary size n, for every supported K (closed forms, no enumeration of draft tuples,
        no LP that grows faster than n). :meth:`output_distribution` always enumerates.
    exact_capable : bool
        ``acceptance(..., exact=True)`` returns a Fraction.
    exact_output : bool
        ``output_distribution(..., exact=True)`` runs in Fraction arithmetic (False for the
        schemes whose selection weights come from a floating-point LP).
    batch_capable : bool
        :meth:`select_batch` is implemented (torch).
    batch_laws : tuple of str or None
        ``law.name`` values :meth:`select_batch` accepts (None: all of ``supported_laws``).
    """

    name: ClassVar[str]
    supported_laws: ClassVar[tuple[str, ...]]
    k_range: ClassVar[tuple[int, int | None]] = (1, None)
    optimal: ClassVar[bool] = False
    lp_laws: ClassVar[tuple[str, ...]] = ()
    any_vocabulary_laws: ClassVar[tuple[str, ...]] = ()
    exact_capable: ClassVar[bool] = False
    exact_output: ClassVar[bool] = False
    batch_capable: ClassVar[bool] = False
    batch_laws: ClassVar[tuple[str, ...] | None] = None

    # -- hooks ---------------------------------------------------------------------------------

    @abstractmethod
    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> Any:
        """Everything that does not depend on the drafts (residuals, ρ*, LP weights)."""

    @abstractmethod
    def _conditional(self, plan: Any, tuples: np.ndarray) -> np.ndarray:
        """Exact law of Y given each tuple: ``[m, K] -> [m, n]``."""

    @abstractmethod
    def _sample(self, plan: Any, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One output token per tuple, ``[N, K] -> [N]``."""

    def _closed_form(self, p: np.ndarray, law: DraftLaw, exact: bool) -> float | Fraction | None:
        """Published closed-form acceptance, or None to fall back to enumeration."""
        return None

    # -- public interface ----------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @classmethod
    def supports_k(cls, k: int) -> bool:
        """Whether ``k`` drafts lie in the scheme's ``k_range``."""
        low, high = cls.k_range
        return low <= k and (high is None or k <= high)

    @classmethod
    def k_rule(cls) -> str:
        """``k_range`` in words (``"K = 2"``, ``"K >= 2"``, ``"2 <= K <= 4"``; empty for any K)."""
        low, high = cls.k_range
        if high is None:
            return "" if low <= 1 else f"K >= {low}"
        return f"K = {low}" if low == high else f"{low} <= K <= {high}"

    def supports(self, law: DraftLaw) -> bool:
        """Whether the scheme applies to ``law`` (its name and its number of drafts)."""
        return isinstance(law, DraftLaw) and law.name in self.supported_laws and self.supports_k(law.k)

    def supports_batch(self, law: DraftLaw) -> bool:
        """Whether :meth:`select_batch` applies to drafts from ``law``."""
        laws = self.supported_laws if self.batch_laws is None else self.batch_laws
        return self.batch_capable and self.supports(law) and law.name in laws

    def check(self, target: object, law: DraftLaw, exact: bool = False) -> np.ndarray:
        """Validate ``law`` against the scheme and ``target`` against the law; return p.

        Float mode returns a float64 array; exact mode an object array of Fractions (needs an
        exact-capable scheme, an exact law and a target given as Fractions or ``"a/b"``).
        """
        if not isinstance(law, DraftLaw):
            raise ValueError(f"law: expected a DraftLaw (IID, Independent, ...), got {type(law).__name__}")
        if not self.supports(law):
            rule = f" ({self.k_rule()})" if self.k_rule() else ""
            raise ValueError(
                f"scheme {self.name!r} supports the {', '.join(self.supported_laws)} laws{rule}; "
                f"got the {law.name} law with k={law.k}"
            )
        if exact:
            p = np.array(as_exact_distribution(target, "target"), dtype=object)
            if not law.exact:
                raise ValueError(
                    f"{law.name} law: exact mode needs draft probabilities given as Fractions, "
                    "integers or 'a/b' strings"
                )
        else:
            p = as_distribution(target, "target")
        if len(p) != law.n:
            raise ValueError(f"target: length {len(p)} does not match the draft law's vocabulary n={law.n}")
        return p

    def _check_exact(self, exact: bool, output: bool) -> None:
        allowed = self.exact_output if output else self.exact_capable
        if exact and not allowed:
            what = "output distribution" if output else "acceptance"
            raise ValueError(f"scheme {self.name!r}: no exact (Fraction) {what}; use exact=False")

    def acceptance(self, target: object, law: DraftLaw, exact: bool = False) -> float | Fraction:
        """``P(Y ∈ set(X))`` exactly: the published closed form where one exists, else by
        enumeration (:meth:`enumerated_acceptance`). A Fraction when ``exact=True``."""
        self._check_exact(exact, output=False)
        p = self.check(target, law, exact)
        value = self._closed_form(p, law, exact)
        if value is None:
            try:
                return self.enumerated_acceptance(target, law, exact=exact)
            except ProblemTooLargeError as error:  # its advice names the optimum, not this scheme
                raise ProblemTooLargeError(
                    error.estimate, error.limit_name, error.limit,
                    f"{self.name} has no closed-form acceptance for the {law.name} law with k={law.k}, and its exact "
                    "value sums over every draft tuple; shrink the drafts' support (e.g. top_k) or raise the limit",
                ) from None
        return value if exact else float(value)

    def enumerated_acceptance(self, target: object, law: DraftLaw, exact: bool = False) -> float | Fraction:
        """``Σ_x D(x) Σ_{y ∈ set(x)} P(Y = y | X = x)`` over the law's tuples (small n)."""
        self._check_exact(exact, output=True)
        p = self.check(target, law, exact)
        plan = self._prepare(p, law, exact)
        tuples, probs = law.enumerate(exact=exact)
        total = Fraction(0) if exact else 0.0
        for rows in self._chunks(len(tuples), law.n):
            conditional = self._conditional(plan, tuples[rows])
            inside = membership(tuples[rows], law.n)
            hit = np.where(inside, conditional, 0).sum(axis=-1)
            total = total + (hit * probs[rows]).sum()
        return total if exact else float(total)

    def conditional_distribution(
        self, target: object, law: DraftLaw, drafts: object, exact: bool = False
    ) -> np.ndarray:
        """``P(Y = y | X = x)`` for draft tuples ``drafts [K]`` or ``[m, K]`` (rows validated
        by ``law.check_tuple``); returns ``[n]`` or ``[m, n]``."""
        self._check_exact(exact, output=True)
        p = self.check(target, law, exact)
        tuples, single = self._tuples(law, drafts)
        out = self._conditional(self._prepare(p, law, exact), tuples)
        return out[0] if single else out

    def output_distribution(self, target: object, law: DraftLaw, exact: bool = False) -> np.ndarray:
        """``P(Y = y) = Σ_x D(x) P(Y = y | X = x)`` by enumerating the law's tuples.

        Equal to the target for a lossless scheme: the proof of losslessness for one case
        (exactly, in Fractions, when ``exact=True``). Cost O(n^K · n).
        """
        self._check_exact(exact, output=True)
        p = self.check(target, law, exact)
        plan = self._prepare(p, law, exact)
        tuples, probs = law.enumerate(exact=exact)
        out = np.array([Fraction(0)] * law.n, dtype=object) if exact else np.zeros(law.n)
        for rows in self._chunks(len(tuples), law.n):
            out = out + probs[rows] @ self._conditional(plan, tuples[rows])
        return out

    def sample(
        self, target: object, law: DraftLaw, drafts: object, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Run the scheme once per row of ``drafts [N, K]``: ``(tokens [N], accepted [N])``.

        Vectorised over the rows; ``accepted`` is ``token ∈ set(row)``.
        """
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
        p = self.check(target, law)
        tuples, _ = self._tuples(law, drafts, require_rows=True)
        tokens = self._sample(self._prepare(p, law, False), tuples, rng)
        return tokens, (tuples == tokens[:, None]).any(axis=-1)

    def select(self, target: object, law: DraftLaw, drafts: object, rng: np.random.Generator) -> Selection:
        """Run the scheme once on the draft tuple ``drafts [K]`` (validated by the law)."""
        self.check(target, law)
        drafts = np.asarray(drafts)
        if drafts.ndim != 1:
            raise ValueError(f"drafts: expected one tuple of {law.k} token ids, got shape {drafts.shape}")
        drafts = law.check_tuple(drafts)
        tokens, accepted = self.sample(target, law, drafts[None, :], rng)
        token = int(tokens[0])
        position = int(np.flatnonzero(drafts == token)[0]) if accepted[0] else None
        return Selection(token, bool(accepted[0]), position)

    def select_batch(self, target, drafts, tokens, generator):
        """Batched torch form: ``target [B, n]``, ``drafts [B, K, n]`` (the draft distribution
        of each draft), ``tokens [B, K]`` -> ``(output [B] long, accepted [B] bool)``."""
        from multidraft.schemes import SCHEMES

        capable = ", ".join(name for name, cls in SCHEMES.items() if cls.batch_capable)
        raise ValueError(f"scheme {self.name!r} has no batched torch form; schemes with one: {capable}")

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _chunks(m: int, n: int):
        step = max(1, _CHUNK_ENTRIES // max(n, 1))
        return [slice(start, start + step) for start in range(0, m, step)]

    @staticmethod
    def _tuples(law: DraftLaw, drafts: object, require_rows: bool = False) -> tuple[np.ndarray, bool]:
        array = np.asarray(drafts)
        single = array.ndim == 1
        if single and not require_rows:
            array = array[None, :]
        if array.ndim != 2 or array.shape[1] != law.k:
            raise ValueError(
                f"drafts: expected draft tuples of shape [m, {law.k}] (k={law.k}), got shape {array.shape}"
            )
        unique = np.unique(array, axis=0) if len(array) else array
        for row in unique:
            law.check_tuple(row)
        return array.astype(np.int64), single

