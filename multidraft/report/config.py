"""What determines a report's numbers: :class:`ReportConfig`."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["ReportConfig"]

#: Seeds are below this bound: numpy takes any non-negative integer, the real-model section
#: seeds measurement i with ``seed + i``, which must stay below 2**63 - 1.
SEED_LIMIT = 2**62


@dataclass(frozen=True)
class ReportConfig:
    """Everything that determines the report's numbers.

    Attributes
    ----------
    seed : int
        Seed of the ``numpy.random.Generator`` for the synthetic positions (and of the
        real-model measurement): an integer in [0, 2**62).
    n : int
        Vocabulary size of the synthetic positions (49152, a SmolLM2-sized vocabulary).
    positions : int
        Number of synthetic positions (Zipf-like targets) the gap table averages over.
    ks, temperatures, pairs : sequences
        Numbers of drafts, draft temperatures (target at 1.0) and non-identical temperature
        pairs of the gap table.
    truncation_s : int
        Tokens kept by the truncated LP in the gap table.
    s_values : tuple[int, ...]
        Truncation sizes of the truncated-LP sweep.
    sweep_temperature, speed_temperature : float
        Draft temperatures of the truncated-LP sweep and of the speed-up section.
    cost_ratios : tuple[float, ...]
        Given draft/target latency ratios c for the predicted speed-up.
    family_points : int
        Points along the Figure-2 family.
    target, draft : str or None
        Model specs for the real-model section (``target="default"`` and ``draft=None`` for
        the bundled SmolLM2 with itself as temperature-shifted draft); None skips it.
    """

    seed: int = 0
    n: int = 49152
    positions: int = 3
    ks: tuple[int, ...] = (2, 4, 8)
    temperatures: tuple[float, ...] = (0.5, 0.8, 1.2, 1.6, 2.0)
    pairs: tuple[tuple[float, float], ...] = ((0.5, 1.2), (0.8, 1.6), (1.2, 2.0), (0.5, 2.0), (1.6, 2.0))
    truncation_s: int = 5
    s_values: tuple[int, ...] = (1, 2, 3, 5, 8, 10, 15, 20, 30)
    sweep_temperature: float = 0.8
    speed_temperature: float = 0.8
    cost_ratios: tuple[float, ...] = (0.05, 0.2)
    family_points: int = 121
    target: str | None = None
    draft: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < SEED_LIMIT:
            raise ValueError(f"seed: expected an integer in [0, 2**62), got {self.seed!r}")
        if self.n < 2:
            raise ValueError(f"n: needs a vocabulary of at least 2 tokens, got {self.n}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"ks: needs numbers of drafts >= 1, got {self.ks}")
        if any(t <= 0 for t in self.temperatures) or any(t <= 0 for pair in self.pairs for t in pair):
            raise ValueError("temperatures: draft temperatures must be > 0")
        if any(not 0 <= c for c in self.cost_ratios):
            raise ValueError(f"cost_ratios: must be >= 0, got {self.cost_ratios}")
        if self.draft is not None and self.target is None:
            raise ValueError("draft: a draft model needs a target model (--target)")

    def to_json(self) -> dict:
        """The configuration as JSON-ready lists and numbers (``results["config"]``)."""
        return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()}
