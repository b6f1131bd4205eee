"""Deprecated: ``multidraft.theory.distributions`` is now :mod:`multidraft.theory.laws`; this alias goes in the release after 0.1.0."""

import warnings

from multidraft.theory.laws import _distributions, _families
from multidraft.theory.laws._distributions import *  # noqa: F403 -- the same objects under the old path
from multidraft.theory.laws._families import *  # noqa: F403

__all__ = [*_distributions.__all__, *_families.__all__]

warnings.warn(
    "multidraft.theory.distributions is deprecated and will be removed in the release after 0.1.0; import from multidraft.theory.laws instead",
    DeprecationWarning,
    stacklevel=2,
)
