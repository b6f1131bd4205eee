"""Deprecated: ``multidraft.theory.optimal`` is now :mod:`multidraft.theory.optimum`; this alias goes in the release after 0.1.0."""

import warnings

from multidraft.theory.optimum._acceptance import *  # noqa: F403 -- the same objects under the old path
from multidraft.theory.optimum._acceptance import __all__, BATCH_LAWS  # noqa: F401 -- BATCH_LAWS was imported from here too

warnings.warn(
    "multidraft.theory.optimal is deprecated and will be removed in the release after 0.1.0; import from multidraft.theory.optimum instead",
    DeprecationWarning,
    stacklevel=2,
)
