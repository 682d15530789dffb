"""The results store: ``RunStore`` (``runstore``), its tables and migrations (``schema``),
the streaming ``writer`` and ``writes``, ``reads``, ``export``, ``prune`` and ``imports``."""
