"""Domain errors: raised by services, turned into page messages or 4xx JSON at the edge."""


class DomainError(Exception):
    """A refusal the user should read; `field` names the input at fault when there is one."""

    status = 400
    field: str | None = None

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        if field:
            self.field = field


class Conflict(DomainError):
    status = 409
