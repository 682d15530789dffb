"""One exception type for problems the user can fix; the CLI prints it as one line."""


class StackError(RuntimeError):
    """A problem with the stack, phrased for the user: what is wrong and what to do.

    ``exit_code`` 2 marks misuse (bad flags, a bad config, a port already taken);
    1 is a failure at run time (a service that would not start).
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
