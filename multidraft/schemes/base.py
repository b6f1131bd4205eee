"""The shared interface of token-level selection schemes: a scheme is a factory of plans.

A **token-level selection scheme** maps the draft tuple X = (X_1, ..., X_K), the target p, the
draft law D and fresh randomness to an output token Y with ``P(Y = y) = p(y)`` exactly
(lossless). Its **acceptance** is ``P(Y ∈ set(X))`` (theory.md, "Notation"): the chance that
the emitted token is one of the drafts, which the optimal acceptance P* bounds from above.

:meth:`Scheme.prepare` validates ``(target, law)`` once and returns a :class:`Plan`: everything
that does not depend on the drafts (residuals, ρ*, selection weights, a fitted rule). The plan
answers, with one signature style (DESIGN.md, "The core objects"):

* :attr:`Plan.acceptance` -- exactly, by closed form where one is published
  (:meth:`Plan.closed_form`), else by enumerating the law's draft tuples
  (:meth:`Plan.enumerated_acceptance`, also the second, independent route the tests compare a
  closed form against);
* :meth:`Plan.conditional` -- the exact law of Y given each draft tuple, and
  :meth:`Plan.output_distribution`, ``Σ_x D(x) P(Y = · | X = x)``: the proof of losslessness
  for one case (small n), in :class:`~fractions.Fraction` arithmetic for an exact plan;
* :meth:`Plan.sample` (N tuples at once, vectorised) and :meth:`Plan.select` (one tuple), driven
  by an explicit :class:`numpy.random.Generator`.

:class:`Scheme` has the same questions as one-call conveniences (``acceptance(target, law)``,
...), each preparing a plan, and :meth:`Scheme.select_batch`, the torch form over a batch of
positions for decoding, where the scheme has one. What a scheme is -- the draft-law classes and
K it supports, whether it is optimal, exact, runs at any vocabulary size or imports the LP
layer -- is one :class:`Capabilities` value on its class; whether it has a batched form is read
off the class (it overrides ``select_batch``). The registry tests read both, so a new scheme
(``name``, ``capabilities``, ``_prepare`` returning its plan, optionally ``select_batch``) is
tested by registering it (:func:`multidraft.schemes.register_scheme`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import ClassVar

import numpy as np

from multidraft.theory import canonical_step, field, normalise, positive_part, safe_divide
from multidraft.theory.laws import DraftLaw, ProblemTooLargeError, SizeEstimate, check_law, check_size, membership
from multidraft.theory.verifier import TargetSplit

__all__ = [
    "Selection",
    "Capabilities",
    "Plan",
    "SequentialPlan",
    "SupportPlan",
    "Scheme",
    "positive_part",
    "safe_divide",
    "normalise",
    "sample_rows",
    "SequentialRule",
    "canonical_step",
    "single_draft_step",
]

#: Largest number of entries of the ``[m, n]`` conditional matrix built at once.
_CHUNK_ENTRIES = 4_000_000
#: Peak bytes per entry of an ``[m, n]`` conditional law: the float64 result and two temporaries.
CONDITIONAL_BYTES_PER_ENTRY = 24


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
# Sampling shared by the plans (float64 and exact arrays; the arithmetic itself is
# multidraft.theory's: positive_part, safe_divide, normalise, canonical_step, re-exported here).


#: The canonical single-draft step under its former name (:func:`multidraft.theory.canonical_step`).
single_draft_step = canonical_step


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


@dataclass(frozen=True, eq=False)
class SequentialRule:
    """A scheme that tests the drafts in order and falls back to one residual law, held on a
    support S of the vocabulary (:class:`~multidraft.theory.verifier.TargetSplit`): draft i is
    accepted with probability ``step[i, x_i]`` (0 off S: no draft lies there), and the
    residual is ``residual`` on S and ``outside · p`` off S (the residuals of these schemes equal
    p up to a scale wherever no draft can be). A split at the whole vocabulary is the dense
    rule (:meth:`dense`).

    Attributes
    ----------
    split : TargetSplit
        The target and the support S.
    step : ndarray [K, s] or [s]
        Acceptance probability of each token of S at each tested position (or shared).
    residual : ndarray [s]
        The residual law on S.
    outside : float or Fraction
        The residual off S is ``outside · p`` (0 for a full support).
    """

    split: TargetSplit
    step: np.ndarray
    residual: np.ndarray
    outside: float | Fraction = 0.0

    @classmethod
    def dense(cls, target: np.ndarray, step: np.ndarray, residual: np.ndarray) -> SequentialRule:
        """The rule of a step and residual over the whole vocabulary."""
        return cls(TargetSplit(target), step, residual)

    @cached_property
    def dense_residual(self) -> np.ndarray:
        """The residual law over the vocabulary [n] (built once, for :meth:`conditional`; read-only)."""
        out = self.split.dense(self.residual, self.outside)
        out.flags.writeable = False
        return out

    @property
    def dense_step(self) -> np.ndarray:
        """The step over the vocabulary, ``[K, n]`` or ``[n]`` (0 off S)."""
        return self.split.dense(self.step, 0)

    def _accept(self, tuples: np.ndarray) -> np.ndarray:
        """``step[i, x_i]`` for every draft of ``tuples [m, K]`` (a step of one row, or [s],
        shared by every column)."""
        k = tuples.shape[1]
        step = np.broadcast_to(self.step, (k, self.step.shape[-1]))
        return step[np.arange(k)[None, :], self.split.local(tuples)]

    def conditional(self, tuples: np.ndarray) -> np.ndarray:
        """Law of Y given each tuple ``[m, K] -> [m, n]`` (:func:`sequential_conditional`), in
        the arithmetic of the rule (floats or Fractions)."""
        return sequential_conditional(self._accept(tuples), tuples, self.dense_residual)

    def sample(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Run the test on ``tuples [N, K]``: accept ``x_i`` iff ``U_i < a_i(x_i)`` for the first
        such i, else draw from the residual (:meth:`TargetSplit.draw`: on S, or from p off S)."""
        uniforms = rng.random(tuples.shape)
        accepted = uniforms < np.asarray(self._accept(tuples), dtype=np.float64)
        return sequential_draw(tuples, accepted, lambda count: self.split.draw(self.residual, self.outside, rng.random(count)))


def sequential_conditional(accept: np.ndarray, tuples: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """Law of Y given each tuple of a sequential test, ``[m, n]``:

        P(Y = y | x) = Σ_i 1[x_i = y] a_i(x_i) Π_{j<i} (1 - a_j(x_j)) + Π_j (1 - a_j(x_j)) res(y),

    from ``accept [m, K]`` = a_i(x_i), ``tuples [m, K]`` and the dense residual ``[n]`` (floats or
    Fractions alike)."""
    m, k = tuples.shape
    arithmetic = field(accept.dtype == object)
    hits = arithmetic.zeros((m, k))
    reach = arithmetic.ones(m)
    for i in range(k):
        hits[:, i] = reach * accept[:, i]
        reach = reach * (1 - accept[:, i])
    out = reach[:, None] * residual[None, :]
    rows = np.repeat(np.arange(m), k)
    np.add.at(out, (rows, tuples.reshape(-1)), hits.reshape(-1))
    return out


def sequential_draw(tuples: np.ndarray, accepted: np.ndarray, draw_residual) -> np.ndarray:
    """The output of a sequential test on ``tuples [N, K]`` given which draws passed
    (``accepted [N, K]``, ``U_i < a_i(x_i)``): the first accepted draft of each row, else one draw
    of ``draw_residual(count) -> [count]`` for the ``count`` rows that accepted none."""
    n_rows = len(tuples)
    tokens = tuples[np.arange(n_rows), np.argmax(accepted, axis=-1)].copy()
    rejected = np.flatnonzero(~accepted.any(axis=-1))
    if len(rejected):
        tokens[rejected] = draw_residual(len(rejected))
    return tokens


# ----------------------------------------------------------------------------------------------


Laws = tuple[type[DraftLaw], ...]


@dataclass(frozen=True)
class Capabilities:
    """What a scheme is: the facts the registry tests check, decoding routes on and the CLI lists.

    Attributes
    ----------
    laws : tuple of DraftLaw classes
        The draft laws the scheme accepts (``isinstance``).
    k_range : (int, int or None)
        Smallest and largest number of drafts K (None: no upper bound).
    optimal : bool
        The acceptance equals the optimum P* for every law and K the scheme supports (exactly,
        or up to the LP's tolerance for LP weights).
    exact_output : bool
        Plans run in Fraction arithmetic (``exact=True``): the conditional laws, the output
        distribution and the acceptance (False for weights from a floating-point LP).
    exact_acceptance : bool or None
        ``acceptance(..., exact=True)`` returns a Fraction; None: the same as ``exact_output``.
    any_vocabulary : tuple of DraftLaw classes
        Laws for which the acceptance and the sampler run at any vocabulary size n, for every
        supported K (closed forms, no enumeration of draft tuples, no LP that grows faster than
        n). The output distribution always enumerates.
    imports_lp : tuple of DraftLaw classes
        Laws for which running the scheme imports :mod:`multidraft.lp` (an LP or the truncated
        selection: float weights, slower per call); empty for the schemes of closed forms.
    batch_laws : tuple of DraftLaw classes or None
        Laws :meth:`Scheme.select_batch` accepts, for a scheme that has it (None: all of ``laws``).
    """

    laws: Laws
    k_range: tuple[int, int | None] = (1, None)
    optimal: bool = False
    exact_output: bool = False
    exact_acceptance: bool | None = None
    any_vocabulary: Laws = ()
    imports_lp: Laws = ()
    batch_laws: Laws | None = None

    def __post_init__(self) -> None:
        if self.exact_acceptance is None:
            object.__setattr__(self, "exact_acceptance", self.exact_output)
        for name in ("any_vocabulary", "imports_lp", "batch_laws"):
            extra = [cls.__name__ for cls in getattr(self, name) or () if not issubclass(cls, self.laws)]
            if extra:
                raise ValueError(f"capabilities: {name} names laws outside laws: {', '.join(extra)}")
        low, high = self.k_range
        if low < 1 or (high is not None and high < low):
            raise ValueError(f"capabilities: k_range must satisfy 1 <= low <= high, got {self.k_range}")


@dataclass(frozen=True, eq=False)
class Plan(ABC):
    """A scheme prepared for one ``(target, law)``: what does not depend on the drafts.

    Subclasses implement :meth:`conditional` and :meth:`sample` over validated draft tuples and,
    where one is published, :meth:`closed_form`; heavy parts (an LP, a fitted rule) are
    computed on first use, so a plan asked only for its acceptance never builds them.

    Attributes
    ----------
    scheme : Scheme
        The scheme that prepared the plan (its name and capabilities).
    target : ndarray [n]
        p, float64, or Fractions (object array) in an exact plan.
    law : DraftLaw
        The draft law D.
    exact : bool
        Fraction arithmetic (``scheme.capabilities.exact_output``; a scheme with an exact
        acceptance only answers :attr:`acceptance` exactly).
    """

    scheme: Scheme
    target: np.ndarray
    law: DraftLaw
    exact: bool

    @abstractmethod
    def conditional(self, tuples: np.ndarray) -> np.ndarray:
        """Exact law of Y given each draft tuple: ``tuples [m, K] -> [m, n]`` (tuples valid
        under the law)."""

    @abstractmethod
    def sample(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One output token per draft tuple, ``tuples [N, K] -> [N]`` int64 (tuples valid)."""

    def closed_form(self) -> float | Fraction | None:
        """The published closed-form acceptance, or None to enumerate the law's tuples."""
        return None

    @cached_property
    def acceptance(self) -> float | Fraction:
        """``P(Y ∈ set(X))`` exactly: :meth:`closed_form` where one exists, else by enumeration
        (:meth:`enumerated_acceptance`). A Fraction in an exact plan."""
        value = self.closed_form()
        if value is not None:
            return value if self.exact else float(value)
        try:
            return self.enumerated_acceptance()
        except ProblemTooLargeError as error:  # its advice names the optimum, not this scheme
            raise ProblemTooLargeError(
                error.estimate, error.limit_name, error.limit,
                f"{self.scheme.name} has no closed-form acceptance for the {self.law.name} law with k={self.law.k}, "
                "and its exact value sums over every draft tuple; shrink the drafts' support (e.g. top_k) or raise the limit",
            ) from None

    def enumerated_acceptance(self) -> float | Fraction:
        """``Σ_x D(x) Σ_{y ∈ set(x)} P(Y = y | X = x)`` over the law's tuples (small n)."""
        self._require_exact_output()
        tuples, probs = self.law.enumerate(exact=self.exact)
        total = field(self.exact).zero
        for rows in _chunks(len(tuples), self.law.n):
            inside = membership(tuples[rows], self.law.n)
            hit = np.where(inside, self.conditional(tuples[rows]), 0).sum(axis=-1)
            total = total + (hit * probs[rows]).sum()
        return total if self.exact else float(total)

    def output_distribution(self) -> np.ndarray:
        """``P(Y = y) = Σ_x D(x) P(Y = y | X = x)`` by enumerating the law's tuples.

        Equal to the target for a lossless scheme: the proof of losslessness for one case
        (exactly, in Fractions, for an exact plan). Cost O(n^K · n).
        """
        self._require_exact_output()
        tuples, probs = self.law.enumerate(exact=self.exact)
        out = field(self.exact).zeros(self.law.n)
        for rows in _chunks(len(tuples), self.law.n):
            out = out + probs[rows] @ self.conditional(tuples[rows])
        return out

    def select(self, drafts: object, rng: np.random.Generator) -> Selection:
        """Run the plan once on the draft tuple ``drafts [K]`` (validated by the law)."""
        drafts = np.asarray(drafts)
        if drafts.ndim != 1:
            raise ValueError(f"drafts: expected one tuple of {self.law.k} token ids, got shape {drafts.shape}")
        drafts = self.law.check_tuple(drafts)
        token = int(self.sample(drafts[None, :], _check_rng(rng))[0])
        hits = np.flatnonzero(drafts == token)
        return Selection(token, bool(hits.size), int(hits[0]) if hits.size else None)

    def _require_exact_output(self) -> None:
        if self.exact and not self.scheme.capabilities.exact_output:
            raise ValueError(f"scheme {self.scheme.name!r}: no exact (Fraction) output distribution; use exact=False")


class SequentialPlan(Plan):
    """A plan that tests the drafts in order against acceptance probabilities and falls back
    to one residual law: ``rule = (step [K, n] or [n], residual [n])``, computed on first use,
    applied to the ``columns`` of each tuple (all drafts by default) as a
    :class:`SequentialRule` (:attr:`sequential_rule`)."""

    columns: ClassVar[slice] = slice(None)

    @property
    @abstractmethod
    def rule(self) -> tuple[np.ndarray, np.ndarray]:
        """``(step, residual)``: the acceptance probability of each token at each tested
        position, and the law sampled when every draft is rejected."""

    @cached_property
    def sequential_rule(self) -> SequentialRule:
        """The rule that runs: :attr:`rule` over the whole vocabulary."""
        return SequentialRule.dense(self.target, *self.rule)

    def conditional(self, tuples: np.ndarray) -> np.ndarray:
        return self.sequential_rule.conditional(tuples[:, self.columns])

    def sample(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.sequential_rule.sample(tuples[:, self.columns], rng)


class SupportPlan(SequentialPlan):
    """A sequential plan held on the drafts' support S plus the target's mass outside it
    (:class:`~multidraft.theory.verifier.TargetSplit`): for the schemes whose residuals equal p
    up to a scale wherever no draft can be, so that everything after reading p costs O(|S|).
    Subclasses compute :attr:`sequential_rule` on S; :attr:`rule` is its dense view. The split
    is the whole vocabulary in an exact plan and when the drafts cover it (the same rule as the
    optimal verifier's fit, :func:`multidraft.theory.verifier.fit_curtain_rule`)."""

    @cached_property
    def split(self) -> TargetSplit:
        """p split at the law's support (:meth:`~multidraft.theory.laws.DraftLaw.support_tokens`)."""
        return TargetSplit(self.target) if self.exact else TargetSplit(self.target, self.law.support_tokens())

    @cached_property
    def drafts(self) -> np.ndarray:
        """The K marginals on S, ``[K, s]`` (the law's own rows when S is everything)."""
        if self.split.whole:
            return self.law.marginals(self.exact)
        return self.law.marginals_on(self.split.support, self.exact)

    @property
    @abstractmethod
    def sequential_rule(self) -> SequentialRule:
        """The rule on S."""

    @property
    def rule(self) -> tuple[np.ndarray, np.ndarray]:
        """The dense view ``(step [K, n] or [n], residual [n])`` of :attr:`sequential_rule` (O(n))."""
        return self.sequential_rule.dense_step, self.sequential_rule.dense_residual


class Scheme(ABC):
    """A token-level selection scheme: a lossless map from draft tuples to an output token.

    Class attributes
    ----------------
    name : str
        Registry name (``"specinfer"``, ...).
    capabilities : Capabilities
        The laws and K it supports and what it guarantees (:class:`Capabilities`).

    A subclass implements ``_prepare(p, law, exact) -> Plan`` (``p`` and ``law`` already
    validated, the law supported) and, for decoding on the device, ``select_batch``.
    """

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    @abstractmethod
    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> Plan:
        """The plan for a validated target ``p`` and a supported ``law``."""

    # -- what the scheme is --------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @classmethod
    def supports_k(cls, k: int) -> bool:
        """Whether ``k`` drafts lie in the scheme's ``k_range``."""
        low, high = cls.capabilities.k_range
        return low <= k and (high is None or k <= high)

    @classmethod
    def k_rule(cls) -> str:
        """``k_range`` in words (``"K = 2"``, ``"K >= 2"``, ``"2 <= K <= 4"``; empty for any K)."""
        low, high = cls.capabilities.k_range
        if high is None:
            return "" if low <= 1 else f"K >= {low}"
        return f"K = {low}" if low == high else f"{low} <= K <= {high}"

    @classmethod
    def has_batch_form(cls) -> bool:
        """Whether the class implements :meth:`select_batch` (a batched torch form)."""
        return cls.select_batch is not Scheme.select_batch

    @classmethod
    def supports_law(cls, law_class: type[DraftLaw], k: int) -> bool:
        """Whether the scheme applies to laws of class ``law_class`` with ``k`` drafts."""
        return issubclass(law_class, cls.capabilities.laws) and cls.supports_k(k)

    def supports(self, law: DraftLaw) -> bool:
        """Whether the scheme applies to ``law`` (its class and its number of drafts)."""
        return isinstance(law, DraftLaw) and self.supports_law(type(law), law.k)

    @classmethod
    def supports_batch_law(cls, law_class: type[DraftLaw], k: int) -> bool:
        """Whether :meth:`select_batch` applies to drafts from a law of class ``law_class``
        with ``k`` drafts (what decoding asks before it has built the law)."""
        laws = cls.capabilities.batch_laws or cls.capabilities.laws
        return cls.has_batch_form() and cls.supports_law(law_class, k) and issubclass(law_class, laws)

    def supports_batch(self, law: DraftLaw) -> bool:
        """Whether :meth:`select_batch` applies to drafts from ``law``."""
        return isinstance(law, DraftLaw) and self.supports_batch_law(type(law), law.k)

    # -- plans ---------------------------------------------------------------------------------

    def prepare(self, target: object, law: DraftLaw, exact: bool = False, copy: bool = True) -> Plan:
        """The plan of this scheme for ``(target, law)``: the law checked against the scheme
        and the target against the law, once.

        ``copy=False``: the plan may hold the caller's target array itself
        (:meth:`DraftLaw.check_target`), for a plan dropped before the array can change.
        ``exact=True`` (a scheme with an exact acceptance, an exact law and a target given as
        Fractions or ``"a/b"``) gives an exact plan: Fraction arithmetic throughout.
        """
        if exact and not self.capabilities.exact_acceptance:
            raise ValueError(f"scheme {self.name!r}: no exact (Fraction) acceptance; use exact=False")
        if not self.supports(check_law(law)):
            rule = f" ({self.k_rule()})" if self.k_rule() else ""
            raise ValueError(
                f"scheme {self.name!r} supports the {', '.join(cls.name for cls in self.capabilities.laws)} "
                f"laws{rule}; got the {law.name} law with k={law.k}"
            )
        return self._prepare(law.check_target(target, exact, copy), law, exact)

    def _prepare_output(self, target: object, law: DraftLaw, exact: bool) -> Plan:
        if exact and not self.capabilities.exact_output:
            raise ValueError(f"scheme {self.name!r}: no exact (Fraction) output distribution; use exact=False")
        return self.prepare(target, law, exact)

    # -- one-call conveniences, each through a plan ----------------------------------------------

    def acceptance(self, target: object, law: DraftLaw, exact: bool = False) -> float | Fraction:
        """``P(Y ∈ set(X))`` exactly (:attr:`Plan.acceptance`). A Fraction when ``exact=True``."""
        return self.prepare(target, law, exact).acceptance

    def enumerated_acceptance(self, target: object, law: DraftLaw, exact: bool = False) -> float | Fraction:
        """``Σ_x D(x) Σ_{y ∈ set(x)} P(Y = y | X = x)`` over the law's tuples (small n)."""
        return self._prepare_output(target, law, exact).enumerated_acceptance()

    def conditional_distribution(
        self, target: object, law: DraftLaw, drafts: object, exact: bool = False
    ) -> np.ndarray:
        """``P(Y = y | X = x)`` for draft tuples ``drafts [K]`` or ``[m, K]`` (rows validated
        by ``law.check_tuple``); returns ``[n]`` or ``[m, n]``.

        Raises :class:`~multidraft.theory.ProblemTooLargeError` before any work when the
        ``[m, n]`` result and its temporaries (:data:`CONDITIONAL_BYTES_PER_ENTRY` per entry)
        would take more than ``MAX_MEMORY``."""
        plan = self._prepare_output(target, law, exact)
        tuples, single = _check_tuples(law, drafts)
        entries = len(tuples) * law.n
        estimate = SizeEstimate(
            f"scheme {self.name!r}: conditional laws of {len(tuples):,} draft tuples over n={law.n:,} tokens",
            entries, CONDITIONAL_BYTES_PER_ENTRY * entries, unit="entries",
        )  # fmt: skip
        check_size(estimate, "ask for fewer draft tuples at a time (or sample(...) for draws)", max_variables=entries)
        out = plan.conditional(tuples)
        return out[0] if single else out

    def output_distribution(self, target: object, law: DraftLaw, exact: bool = False) -> np.ndarray:
        """``P(Y = y) = Σ_x D(x) P(Y = y | X = x)`` (:meth:`Plan.output_distribution`)."""
        return self._prepare_output(target, law, exact).output_distribution()

    def sample(
        self, target: object, law: DraftLaw, drafts: object, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Run the scheme once per row of ``drafts [N, K]``: ``(tokens [N], accepted [N])``.

        Vectorised over the rows; ``accepted`` is ``token ∈ set(row)``.
        """
        _check_rng(rng)
        plan = self.prepare(target, law, copy=False)  # used here and dropped: no copy of the target
        tuples, _ = _check_tuples(law, drafts, require_rows=True)
        tokens = plan.sample(tuples, rng)
        return tokens, (tuples == tokens[:, None]).any(axis=-1)

    def select(self, target: object, law: DraftLaw, drafts: object, rng: np.random.Generator) -> Selection:
        """Run the scheme once on the draft tuple ``drafts [K]`` (:meth:`Plan.select`)."""
        return self.prepare(target, law).select(drafts, rng)

    def select_batch(self, target, drafts, tokens, generator):
        """Batched torch form: ``target [B, n]``, ``drafts [B, K, n]`` (the draft distribution
        of each draft), ``tokens [B, K]`` -> ``(output [B] long, accepted [B] bool)``."""
        capable = ", ".join(name for name, cls in SCHEMES.items() if cls.has_batch_form())
        raise ValueError(f"scheme {self.name!r} has no batched torch form; schemes with one: {capable}")


def _check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def _chunks(m: int, n: int) -> list[slice]:
    step = max(1, _CHUNK_ENTRIES // max(n, 1))
    return [slice(start, start + step) for start in range(0, m, step)]


def _check_tuples(law: DraftLaw, drafts: object, require_rows: bool = False) -> tuple[np.ndarray, bool]:
    """``(tuples [m, K] int64, given as one tuple)``, every distinct row checked by the law."""
    array = np.asarray(drafts)
    single = array.ndim == 1
    if single and not require_rows:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] != law.k:
        raise ValueError(f"drafts: expected draft tuples of shape [m, {law.k}] (k={law.k}), got shape {array.shape}")
    unique = np.unique(array, axis=0) if len(array) > 1 else array  # one row: itself (np.unique costs ~40 µs)
    for row in unique:
        law.check_tuple(row)
    return array.astype(np.int64), single


#: Scheme classes by registry name: the built-in ones (filled in by :mod:`multidraft.schemes`),
#: then those added with :func:`~multidraft.schemes.register_scheme`. Kept here, with the
#: interface, so that the interface can name the registered schemes without importing the package.
SCHEMES: dict[str, type[Scheme]] = {}
