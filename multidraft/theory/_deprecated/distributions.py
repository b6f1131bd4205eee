"""Deprecated: ``multidraft.theory.distributions`` is now :mod:`multidraft.theory.laws`; this alias goes in the release after 0.1.0."""

import warnings

from multidraft.theory.laws._distributions import *  # noqa: F403 -- the same objects under the old path
from multidraft.theory.laws._distributions import __all__

warnings.warn(
    "multidraft.theory.distributions is deprecated and will be removed in the release after 0.1.0; import from multidraft.theory.laws instead",
    DeprecationWarning,
    stacklevel=2,
)
