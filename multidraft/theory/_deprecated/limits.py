"""Deprecated: ``multidraft.theory.limits`` is now :mod:`multidraft.theory.laws`; this alias goes in the release after 0.1.0."""

import warnings

from multidraft.theory.laws._limits import *  # noqa: F403 -- the same objects under the old path
from multidraft.theory.laws._limits import __all__

warnings.warn(
    "multidraft.theory.limits is deprecated and will be removed in the release after 0.1.0; import from multidraft.theory.laws instead",
    DeprecationWarning,
    stacklevel=2,
)
