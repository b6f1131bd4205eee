"""The module paths of ``multidraft.theory`` from before its rooms (issue 29), kept for one release.

``multidraft.theory.distributions``, ``.limits``, ``.optimal`` and ``.support`` were modules;
their contents now live in the rooms ``laws/``, ``optimum/`` and ``verifier/``. The modules here
re-export the same objects under the old paths and warn (``DeprecationWarning``) on import.
``multidraft/theory/__init__.py`` appends this folder to the package's ``__path__``, after its own
directory, so ``import multidraft.theory.distributions`` finds them; they will be removed in the
release after 0.1.0. Nothing in the package imports them.
"""
