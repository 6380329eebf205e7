"""The user-facing failures. The CLI prints ``str(error)`` on one line and exits non-zero."""


class DeployError(Exception):
    """Base of every error a user can act on (no traceback is shown for these)."""

    kind = "DeployError"

    def __str__(self) -> str:
        return f"{self.kind}: {super().__str__()}"


class ModelFormatError(DeployError):
    kind = "ModelFormatError"


class UnsupportedOperator(DeployError):
    kind = "UnsupportedOperator"


class InfeasibleBudget(DeployError):
    """A memory budget is too small; ``minimum_bytes`` is the smallest that would work (of the
    first memory named), ``needs`` the smallest of each memory over (flag -> bytes)."""

    kind = "InfeasibleBudget"

    def __init__(self, message: str, minimum_bytes: int, needs: dict[str, int] | None = None):
        super().__init__(message)
        self.minimum_bytes = minimum_bytes
        self.needs = dict(needs or {})


class UsageError(DeployError):
    kind = "UsageError"
