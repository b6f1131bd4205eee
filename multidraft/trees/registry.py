"""The registry of tree verifiers: exact names, ``token:<scheme>`` for the token walk."""

from __future__ import annotations

from multidraft.trees.base import TreeVerifier
from multidraft.trees.block import BlockVerification
from multidraft.trees.selective import Selective
from multidraft.trees.token import TokenVerifier
from multidraft.trees.traversal import Traversal

__all__ = ["VERIFIERS", "get_verifier", "verifier_names"]

#: Tree verifier classes by registry name (the token walk is ``token:<scheme>``).
VERIFIERS: dict[str, type[TreeVerifier]] = {cls.name: cls for cls in (BlockVerification, Traversal, Selective)}


def verifier_names() -> list[str]:
    """Every registered verifier name: ``token:<scheme>`` for each registered scheme, then the
    block-level verifiers."""
    from multidraft.schemes import SCHEMES

    return [f"token:{name}" for name in SCHEMES] + list(VERIFIERS)


def get_verifier(name: str, **options: object) -> TreeVerifier:
    """The verifier registered as ``name`` (exact names only); for ``token:<scheme>`` the
    ``options`` go to the scheme.

    >>> get_verifier("traversal")
    Traversal()
    >>> get_verifier("token:rrs")
    Traceback (most recent call last):
    ...
    ValueError: verifier: unknown scheme 'rrs' in 'token:rrs'; choose one of single, specinfer, rrs-wor, spectr, is-lp, truncated-lp, multistage, optimal, deterministic, greedy
    """
    if not isinstance(name, str):
        raise ValueError(f"verifier: expected a name, got {type(name).__name__}")
    if name.startswith("token:"):
        from multidraft.schemes import SCHEMES, get_scheme

        scheme = name[len("token:") :]
        if scheme not in SCHEMES:
            raise ValueError(f"verifier: unknown scheme {scheme!r} in {name!r}; choose one of {', '.join(SCHEMES)}")
        return TokenVerifier(get_scheme(scheme, **options))
    if name not in VERIFIERS:
        raise ValueError(f"verifier: unknown name {name!r}; choose one of {', '.join(verifier_names())}")
    if options:
        raise ValueError(f"verifier {name!r}: takes no options, got {sorted(options)}")
    return VERIFIERS[name]()
