"""One exception type for a store the user can fix (missing, not a store, no such run, a bad
prune rule); the commands print it as one line."""


class StoreError(RuntimeError):
    """What is wrong and what to do. ``exit_code`` 2 marks misuse (a bad path or value)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
