"""Deprecated: ``multidraft.theory.support`` is now :mod:`multidraft.theory.verifier`; this alias goes in the release after 0.1.0."""

import warnings

from multidraft.theory.verifier._support import *  # noqa: F403 -- the same objects under the old path
from multidraft.theory.verifier._support import __all__, BLOCK  # noqa: F401 -- BLOCK was imported from here too

warnings.warn(
    "multidraft.theory.support is deprecated and will be removed in the release after 0.1.0; import from multidraft.theory.verifier instead",
    DeprecationWarning,
    stacklevel=2,
)
