"""What a measurement runs: one frozen, validated configuration, checked before any model loads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from multidraft.decoding.drafting import Sampling
from multidraft.decoding.generation import check_without_replacement, resolve_scheme, resolve_verifier
from multidraft.decoding.models import resolve_device
from multidraft.decoding.prompts import PromptSet
from multidraft.decoding.verification import node_law_class
from multidraft.schemes.base import Scheme
from multidraft.theory.laws import check_count, check_k

__all__ = ["DEFAULT_PROMPTS", "MeasureConfig", "check_prompts", "prompt_seeds"]

#: Prompts used when none are given (open-ended, so that sampling matters).
DEFAULT_PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a refrigerator works to a ten-year-old.",
    "List some ideas for a weekend trip in the mountains and say why each is fun.",
    "Describe the taste of your favourite fruit without naming it.",
)
#: Seeds are non-negative integers below this bound.
SEED_LIMIT = 2**63 - 1


def check_prompts(prompts: Sequence[str] | None) -> tuple[str, ...]:
    """The prompts as a tuple of non-empty strings (``None``: :data:`DEFAULT_PROMPTS`)."""
    if prompts is None:
        return DEFAULT_PROMPTS
    if isinstance(prompts, str):
        raise ValueError("prompts: expected a sequence of strings, got one string (wrap it in a list)")
    prompts = tuple(prompts)
    if len(prompts) == 0:
        raise ValueError("prompts: the prompt list is empty; give at least one prompt (or None for the defaults)")
    for text in prompts:
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"prompts: every prompt must be a non-empty string, got {text!r}")
    return prompts


def _check_tasks(tasks: Sequence[str], count: int) -> tuple[str, ...]:
    """The task tags as a tuple: empty (untagged) or one string per prompt."""
    if isinstance(tasks, str) or not isinstance(tasks, Sequence):
        raise ValueError(f"tasks: expected a sequence of strings, got {tasks!r}")
    tasks = tuple(tasks)
    if tasks and len(tasks) != count:
        raise ValueError(f"tasks: one task per prompt, got {len(tasks)} for {count} prompts")
    if not all(isinstance(task, str) for task in tasks):
        raise ValueError(f"tasks: every task must be a string, got {tasks!r}")
    return tasks


def prompt_seeds(seed: int, prompt: int) -> tuple[int, int, int]:
    """Seeds of prompt ``prompt``'s three generators -- drafting (torch), selection (numpy) and
    the baseline (torch) -- drawn from ``numpy.random.SeedSequence([seed, prompt])``: every
    prompt has its own stream, independent of which prompts run beside it.

    >>> prompt_seeds(0, 3) == prompt_seeds(0, 3) != prompt_seeds(0, 4)
    True
    """
    import numpy as np

    drafting, selection, baseline = np.random.SeedSequence([seed, prompt]).generate_state(3, dtype=np.uint64)
    return int(drafting), int(selection), int(baseline)


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected True or False, got {value!r}")
    return value


@dataclass(frozen=True)
class MeasureConfig:
    """The settings of one :func:`~multidraft.decoding.measure` run, validated on construction
    (no model needed, so every bad value is refused before a model loads).

    Attributes
    ----------
    k, length : int
        Number of drafts K and tokens per draft L (>= 1).
    scheme : Scheme
        The selection rule (a registry name is resolved on construction); it must support
        the root law of the drafts.
    prompts : tuple of str
        Non-empty prompts (default :data:`DEFAULT_PROMPTS`); a
        :class:`~multidraft.decoding.prompts.PromptSet` gives the prompts and their tasks.
    tasks : tuple of str
        One task tag per prompt (:meth:`~multidraft.decoding.Results.by_task`), or empty
        (untagged).
    max_new_tokens : int
        New tokens per prompt (>= 1).
    seed : int
        In ``[0, 2**63 - 1)``. Seeds are per prompt: prompt i draws from generators seeded by
        :func:`prompt_seeds` ``(seed, i)``, whatever other prompts run and in which process
        (so a sharded run equals one process, :mod:`multidraft.decoding.sharding`).
    target_sampling : Sampling
        The target's processing; p is recorded after it.
    draft_sampling : tuple of Sampling
        One per draft (a single value is repeated K times); unequal ones make the drafts
        non-identical (Independent law).
    without_replacement : bool
        Draw the K first tokens without replacement (one shared draft sampling, T > 0, top-p 1).
    device : str
        Where models given by name load (``auto``: cuda, mps, cpu); a device torch does not
        report is refused.
    compile : bool
        Static KV caches and compiled forwards (:mod:`multidraft.decoding.state`).
    baseline : bool
        Time plain autoregressive decoding of the same prompts in the same run (speed-up).
    verifiers : tuple of TreeVerifier
        The tree verifiers, each driving its own run on the same prompts and seeds (the first
        gives the token-level records and the baseline); every one is scored on every block
        (:class:`~multidraft.decoding.results.PairedScore`). Names are resolved on
        construction (:func:`~multidraft.decoding.generation.resolve_verifier`: ``"token"`` is
        the token walk with ``scheme``); each must take the drafts (its K and how the tree is
        drafted), and a token verifier's scheme the root law.
    shape : TreeShape, optional
        Draft a tree of this :class:`~multidraft.trees.TreeShape` each block
        (:mod:`multidraft.decoding.tree_drafting`) instead of K chains; ``k`` and ``length``
        then become its root width and depth, its law replaces ``without_replacement``, one
        draft sampling drafts every node and ``compile`` is refused. ``TreeShape.chains``
        becomes ``k``, ``length`` and ``without_replacement`` (the chains path; ``shape`` None).
        Every verifier must be lossless on the shape's law (refused up front, naming the ones
        that are).
    scored : tuple of TreeVerifier
        Further tree verifiers scored on every block (their ``E[τ | tree]`` in every
        :class:`~multidraft.decoding.results.BlockRecord` and a
        :class:`~multidraft.decoding.results.PairedScore`) without driving a run of their own:
        ranking V verifiers on the same trees then costs one run, not V. Resolved and checked
        like ``verifiers``; no name may appear in both.
    """

    k: int = 2
    length: int = 4
    scheme: Any = "specinfer"
    prompts: tuple[str, ...] = DEFAULT_PROMPTS
    tasks: tuple[str, ...] = ()
    max_new_tokens: int = 32
    seed: int = 0
    target_sampling: Sampling = Sampling()
    draft_sampling: tuple[Sampling, ...] = (Sampling(1.5),)
    without_replacement: bool = False
    device: str = "auto"
    compile: bool = False
    baseline: bool = True
    verifiers: tuple[Any, ...] = ("token",)
    scored: tuple[Any, ...] = ()
    shape: Any = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        self._take_shape()
        k = check_k(self.k)
        put(self, "k", k)
        put(self, "length", check_count(self.length, "length"))
        put(self, "max_new_tokens", check_count(self.max_new_tokens, "max_new_tokens"))
        if isinstance(self.prompts, PromptSet):
            if self.tasks:
                raise ValueError("tasks: a PromptSet carries its tasks; give tasks only with a plain prompt list")
            put(self, "tasks", self.prompts.tasks)
            put(self, "prompts", self.prompts.prompts)
        put(self, "prompts", check_prompts(self.prompts))
        put(self, "tasks", _check_tasks(self.tasks, len(self.prompts)))
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
            raise ValueError(f"seed: expected an integer in [0, 2**63 - 1), got {seed!r}")
        if not isinstance(self.target_sampling, Sampling):
            raise ValueError(f"target_sampling: expected a Sampling, got {type(self.target_sampling).__name__}")
        put(self, "draft_sampling", _per_draft(self.draft_sampling, k))
        for name in ("without_replacement", "compile", "baseline"):
            _flag(getattr(self, name), name)
        check_without_replacement(self.draft_sampling, self.without_replacement)
        if not isinstance(self.device, str):
            raise ValueError(f"device: expected a device name such as 'cpu' or 'cuda', got {self.device!r}")
        resolve_device(self.device)
        put(self, "scheme", resolve_scheme(self.scheme))
        put(self, "verifiers", self._resolve_verifiers(self.verifiers, "verifiers"))
        put(self, "scored", self._resolve_verifiers(self.scored, "scored", required=False))
        names = self.verifier_names
        if len(set(names)) < len(names):
            raise ValueError(f"verifiers: each verifier once (driving or scored), got {list(names)}")

    @property
    def verifier_names(self) -> tuple[str, ...]:
        """The registry names (``token:<scheme>`` for the token walk) of every verifier scored
        on each block: the driving ``verifiers``, then the ``scored`` ones."""
        return tuple(verifier.name for verifier in self.scoring)

    @property
    def scoring(self) -> tuple[Any, ...]:
        """Every verifier scored on each block: the driving ``verifiers``, then ``scored``."""
        return self.verifiers + self.scored

    @property
    def scheme_name(self) -> str:
        """The scheme's registry name (its class name for an unnamed object)."""
        return str(getattr(self.scheme, "name", type(self.scheme).__name__))

    @property
    def root_law(self) -> str:
        """Kind of the K drafts' law at the root: ``wor``, ``independent`` or ``iid``
        (:func:`~multidraft.decoding.verification.node_law_class` of the drafts' samplings)."""
        return node_law_class(self.draft_sampling, self.without_replacement).name

    def _take_shape(self) -> None:
        """Check ``shape``; chains become k, length and without_replacement, a tree shape sets
        k (root width) and length (depth)."""
        from multidraft.trees import TreeShape

        shape, put = self.shape, object.__setattr__
        if shape is None:
            return
        if not isinstance(shape, TreeShape):
            raise ValueError(f"shape: expected a TreeShape (multidraft.trees.TreeShape), got {type(shape).__name__}")
        if self.without_replacement:
            raise ValueError("without_replacement: give the law in the TreeShape (law='without-replacement')")
        if not isinstance(self.draft_sampling, Sampling) and len(set(self.draft_sampling)) > 1:
            raise ValueError("draft_sampling: a tree shape drafts every node with one draft sampling; give one")
        put(self, "k", shape.root_width)
        put(self, "length", shape.depth)
        if shape.family == "chains":
            put(self, "without_replacement", shape.law == "without-replacement")
            put(self, "shape", None)
        elif self.compile:
            raise ValueError("compile: tree shapes draft on the dynamic KV cache (a static cache holds a fixed number of rows); drop compile")

    def _node_laws(self) -> set[tuple[type, int]]:
        """The (law class, k_v) of every node of the tree shape."""
        from multidraft.theory.laws import law_class
        from multidraft.trees.shaped import NODE_LAW

        shape = self.shape
        widths = range(1, shape.k + 1) if shape.family == "dynamic" else {len(slot) for slot in shape.slots if slot}
        return {(law_class(NODE_LAW[shape.law]), k) for k in widths}

    def _check_shape_verifier(self, verifier: Any) -> None:
        """Refuse a verifier that is not lossless on the shape's per-node law, naming ones that are."""
        from multidraft.schemes import SCHEMES
        from multidraft.trees import VERIFIERS, TokenVerifier
        from multidraft.trees.token import node_scheme

        drafting = f"shape:{self.shape.law}"
        laws = self._node_laws()
        schemes = [name for name, cls in SCHEMES.items() if all(k == 1 or cls.supports_law(c, k) for c, k in laws)]
        fitting = [f"token:{name}" for name in schemes[:1]]
        fitting += [name for name, cls in VERIFIERS.items() if drafting in cls.drafting and cls.max_k is None]
        if drafting not in verifier.drafting or verifier.max_k is not None:
            raise ValueError(
                f"verifier: {verifier.name!r} is not lossless on trees drafted by the {self.shape.law} law; "
                f"use {' or '.join(fitting)}"
            )
        if isinstance(verifier, TokenVerifier) and isinstance(verifier.scheme, Scheme):
            for cls, k in sorted(laws, key=lambda item: item[1]):
                if not node_scheme(verifier.scheme, cls, k)[0].supports_law(cls, k):
                    self._check_scheme_law(verifier.scheme, cls, k)

    def _resolve_verifiers(self, values: Any, argument: str, required: bool = True) -> tuple[Any, ...]:
        from multidraft.trees import TokenVerifier

        if isinstance(values, str) or not isinstance(values, Sequence):
            values = (values,)
        if required and len(values) == 0:
            raise ValueError(f"{argument}: give at least one verifier (e.g. 'token' for the token walk with the scheme)")
        verifiers = tuple(resolve_verifier(value, self.scheme) for value in values)
        if self.shape is not None:
            for verifier in verifiers:
                self._check_shape_verifier(verifier)
            return verifiers
        root = node_law_class(self.draft_sampling, self.without_replacement)
        for verifier in verifiers:
            if verifier.max_k is not None and self.k > verifier.max_k:
                raise ValueError(f"verifier: {verifier.name!r} takes K <= {verifier.max_k}; got k={self.k}")
            if root.name not in verifier.drafting:
                raise ValueError(f"verifier: {verifier.name!r} takes {', '.join(verifier.drafting)} trees; these drafts are {root.name}")
            if isinstance(verifier, TokenVerifier):
                self._check_scheme_law(verifier.scheme, root, self.k)
        return verifiers

    def _check_scheme_law(self, scheme: Any, root: type, k: int) -> None:
        if not isinstance(scheme, Scheme) or scheme.supports_law(root, k):
            return
        from multidraft.schemes import SCHEMES

        laws = tuple(cls.name for cls in scheme.capabilities.laws)
        fitting = [name for name, cls in SCHEMES.items() if cls.supports_law(root, k)]
        # decoding runs a scheme's batched form where it has one for the law: name such a scheme first
        fitting.sort(key=lambda name: not SCHEMES[name].supports_batch_law(root, k))
        advice = f"; use the scheme {fitting[0]!r}" + (f" (or {', '.join(map(repr, fitting[1:]))})" if fitting[1:] else "") if fitting else ""
        raise ValueError(
            f"scheme: {getattr(scheme, 'name', scheme)!r} supports the laws {laws}, but does not apply to these drafts "
            f"(the {root.name} law with k={k}){advice}"
        )


def _per_draft(values: Sampling | Sequence[Sampling], k: int) -> tuple[Sampling, ...]:
    """One :class:`Sampling` or K of them, as K."""
    if isinstance(values, Sampling):
        values = (values,)
    elif isinstance(values, Sequence) and not isinstance(values, str):
        values = tuple(values)
    if not isinstance(values, tuple) or not values or not all(isinstance(v, Sampling) for v in values):
        raise ValueError(f"draft_sampling: expected a Sampling or a sequence of them, got {values!r}")
    if len(values) == 1:
        return values * k
    if len(values) != k:
        raise ValueError(f"draft_sampling: give one Sampling or k={k} of them, got {len(values)}")
    return values
