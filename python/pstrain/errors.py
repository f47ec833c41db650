"""The one exception the package raises for job, input and RPC failures."""

import grpc


class PstrainError(RuntimeError):
    """A pstrain failure. `code` is the grpc.StatusCode that says what kind
    (INVALID_ARGUMENT for bad input, UNAVAILABLE for a lost peer, ...)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def invalid(message):
    return PstrainError(grpc.StatusCode.INVALID_ARGUMENT, message)


def from_rpc(error, what):
    """A PstrainError for grpc.RpcError `error` of call `what`."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return PstrainError(code, f"{what}: {code.name}: {details}")
