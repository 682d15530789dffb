"""One exception type for load-run problems the user can fix; the CLI prints it as one line."""


class LoadgenError(RuntimeError):
    """What is wrong and what to do. ``exit_code`` 2 marks misuse (bad input, no server)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
