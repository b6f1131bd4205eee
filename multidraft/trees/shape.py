"""Tree shapes as drafters build them: a shape plus the law by which each node drafts its
children from q(· | node) (issue 30; proofs in docs/block_level.md, "Shapes and per-node laws").

A **shape** says how many children each node drafts; a **law** says how:

* ``"iid"`` -- k_v independent draws from q(· | v), merged by first appearance (a token drawn
  twice is one child; its subtree follows the slot of its first draw);
* ``"without-replacement"`` -- k_v distinct tokens by successive sampling (Gumbel-top-k_v order);
* ``"top-k"`` -- the k_v most likely tokens of q(· | v), in decreasing order of q (ties by lower
  id; tokens of draft probability zero are never drafted): deterministic, the greedy law.

Families:

* :meth:`TreeShape.chains` -- K rows of length L (iid rows, or the K first tokens drafted
  without replacement and every row continued alone): the trees of :class:`DraftTree`;
* :meth:`TreeShape.expansion` -- every node at depth d drafts ``k_{d+1}`` children
  (``expansion([k_1, ..., k_L])``);
* :meth:`TreeShape.static` -- a parent array (Medusa/EAGLE-style static trees): slot j's children
  are the slots whose parent is j, in order; node 0 is the root;
* :meth:`TreeShape.dynamic` -- EAGLE-2-style: every node's ``branching`` most likely tokens are
  candidates and the ``budget`` candidates of largest draft path probability Q(u) (depth at
  most ``depth``) are kept; the shape depends only on the draft, so the law is ``"top-k"``.

>>> TreeShape.expansion([2, 1], law="without-replacement")
TreeShape.expansion([2, 1], law='without-replacement')
>>> TreeShape.static([-1, 0, 0, 1]).slots
((1, 2), (3,), (), ())
>>> TreeShape.expansion([2, 1]).node_count
4
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TreeShape", "LAWS", "FAMILIES"]

#: The per-node drafting laws.
LAWS = ("iid", "without-replacement", "top-k")
#: The shape families.
FAMILIES = ("chains", "expansion", "static", "dynamic")


def _count(value: object, name: str, meaning: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum} ({meaning}), got {value!r}")
    return int(value)


def _check_law(law: object, allowed: Sequence[str] = LAWS) -> str:
    if law not in allowed:
        raise ValueError(f"law: unknown {law!r}; choose one of {', '.join(allowed)}")
    return str(law)


@dataclass(frozen=True)
class TreeShape:
    """A tree shape and its per-node drafting law (module docstring); build it with
    :meth:`chains`, :meth:`expansion`, :meth:`static` or :meth:`dynamic`.

    Attributes
    ----------
    family : str
        One of :data:`FAMILIES`.
    law : str
        One of :data:`LAWS`.
    slots : tuple of tuples
        Expansion and static shapes: ``slots[j]`` the child slots of slot j (slot 0 the root),
        so node j drafts ``len(slots[j])`` children. Chains and dynamic shapes: ``()``.
    k, length : int
        Chains: K rows of length L. Dynamic: ``k`` = branching, ``length`` = largest depth.
    budget : int
        Dynamic: drafted nodes kept (0 otherwise).
    """

    family: str
    law: str
    slots: tuple[tuple[int, ...], ...] = ()
    k: int = 0
    length: int = 0
    budget: int = 0

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def chains(cls, k: int, length: int, law: str = "iid") -> TreeShape:
        """K draft sequences of length L: rows drawn iid, or (``law="without-replacement"``)
        the K first tokens without replacement and each row continued alone."""
        k = _count(k, "k", "the number of draft sequences")
        length = _count(length, "length", "the draft length L")
        return cls("chains", _check_law(law, ("iid", "without-replacement")), (), k, length)

    @classmethod
    def expansion(cls, schedule: Sequence[int], law: str = "iid") -> TreeShape:
        """Every node at depth d drafts ``schedule[d]`` children (depth ``len(schedule)``)."""
        if isinstance(schedule, (str, bytes)) or not isinstance(schedule, Sequence) or not schedule:
            raise ValueError(f"schedule: expected a non-empty list of children per depth [k_1, ..., k_L], got {schedule!r}")
        widths = [_count(k, "schedule", "children per node at each depth") for k in schedule]
        parents = [-1]
        level = [0]
        for width in widths:
            following = []
            for slot in level:
                for _ in range(width):
                    following.append(len(parents))
                    parents.append(slot)
            level = following
        shape = cls.static(parents, law)
        return cls("expansion", shape.law, shape.slots, 0, len(widths))

    @classmethod
    def static(cls, parents: Sequence[int], law: str = "iid") -> TreeShape:
        """A static shape from a parent array: ``parents[0] = -1`` (the root) and
        ``0 <= parents[j] < j`` for every other slot; slot j's children are the slots naming
        it, in order."""
        if isinstance(parents, (str, bytes)) or not isinstance(parents, Sequence) or len(parents) < 2:
            raise ValueError(f"parents: expected a parent array [-1, p_1, ...] with at least one drafted node, got {parents!r}")
        if parents[0] != -1:
            raise ValueError(f"parents: slot 0 is the root and must have parent -1, got {parents[0]!r}")
        slots: list[list[int]] = [[] for _ in parents]
        for j, parent in enumerate(parents[1:], start=1):
            if isinstance(parent, bool) or not isinstance(parent, int) or not 0 <= parent < j:
                raise ValueError(f"parents: slot {j} must have a parent among slots 0..{j - 1}, got {parent!r}")
            slots[parent].append(j)
        depth = [0] * len(parents)
        for j in range(1, len(parents)):
            depth[j] = depth[parents[j]] + 1
        return cls("static", _check_law(law), tuple(map(tuple, slots)), 0, max(depth))

    @classmethod
    def dynamic(cls, budget: int, depth: int, branching: int = 2) -> TreeShape:
        """EAGLE-2-style dynamic expansion (law ``"top-k"``): candidates are each node's
        ``branching`` most likely draft tokens; the ``budget`` candidates of largest draft path
        probability ``Q(u) = Π_i q(u_i | u_{<i})`` with |u| <= ``depth`` are kept (ties: the
        shorter, then the lexicographically smaller prefix, so the kept set is prefix-closed)."""
        budget = _count(budget, "budget", "the number of drafted nodes")
        depth = _count(depth, "depth", "the largest depth")
        branching = _count(branching, "branching", "candidate children per node")
        return cls("dynamic", "top-k", (), branching, depth, budget)

    # -- sizes -------------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Largest depth of a drafted node."""
        return self.length

    @property
    def node_count(self) -> int:
        """Drafted nodes of the nominal shape (the root excluded): K·L for chains, the budget
        for dynamic shapes, the slots otherwise (iid merging can only lower it)."""
        if self.family == "chains":
            return self.k * self.length
        if self.family == "dynamic":
            return self.budget
        return len(self.slots) - 1

    @property
    def root_width(self) -> int:
        """Children drafted at the root (K for chains)."""
        return self.k if self.family in ("chains", "dynamic") else len(self.slots[0])

    def __repr__(self) -> str:
        if self.family == "chains":
            return f"TreeShape.chains({self.k}, {self.length}, law={self.law!r})"
        if self.family == "dynamic":
            return f"TreeShape.dynamic({self.budget}, {self.length}, branching={self.k})"
        if self.family == "expansion":
            widths, slot = [], 0
            while self.slots[slot]:
                widths.append(len(self.slots[slot]))
                slot = self.slots[slot][0]
            return f"TreeShape.expansion({widths}, law={self.law!r})"
        parents = [-1] + [0] * (len(self.slots) - 1)
        for j, children in enumerate(self.slots):
            for c in children:
                parents[c] = j
        return f"TreeShape.static({parents}, law={self.law!r})"
