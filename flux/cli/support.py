"""What the entry point and the command handlers share: exit statuses, usage errors, the
``error:`` line, and the client a command's ``--server``/``--api-token`` flags describe."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flux.observe import logs

if TYPE_CHECKING:
    from flux.client import FluxClient

# Listings show this many rows unless --limit says otherwise.
DEFAULT_LIMIT = 50

EXIT_TIMED_OUT = 3
EXIT_INTERRUPTED = 130
EXIT_STATUS = (
    "exit status: 0 ok; 1 refused, or the execution failed or was cancelled; 2 usage error; "
    f"{EXIT_TIMED_OUT} --wait --timeout expired (the execution goes on); "
    f"{EXIT_INTERRUPTED} Ctrl-C while waiting (the execution is left as it is)"
)


class UsageError(Exception):
    """A usage error found after parsing (exit 2), e.g. two input sources at once."""


def error(text: str) -> None:
    """``error: …`` on stderr; one JSON object instead where the process logs in json."""
    if logs.current_format() == "json":
        logs.emit(text, sys.stderr, "ERROR")
    else:
        print(f"error: {text}", file=sys.stderr)


def connect(args: argparse.Namespace) -> FluxClient:
    from flux.client import FluxClient
    from flux.security import Credentials, Role

    credentials = Credentials.for_role(Role.CLIENT, args.api_token, args.ca, args.api_token_file)
    return FluxClient(args.server, credentials=credentials)


class ServiceCalls:
    """A gRPC service's stub on the command's ``--server``/``--api-token`` flags (pools, tenants), its
    failures turned into the client's errors (``client_requests.rpc_error``: the same messages)."""

    TIMEOUT = 30.0

    def __init__(self, args: argparse.Namespace, stub: Callable[[Any], Any]):
        from flux.security import Credentials, Role

        self.address = args.server
        self._credentials = Credentials.for_role(Role.CLIENT, args.api_token, args.ca, args.api_token_file)
        self._channel = self._credentials.channel(args.server)
        self._stub = stub(self._channel)

    def __enter__(self) -> ServiceCalls:
        return self

    def __exit__(self, *exc: object) -> None:
        self._channel.close()

    def call(self, method: str, request: Any) -> Any:
        import grpc

        from flux.client import rpc_error

        try:
            return getattr(self._stub, method)(
                request, timeout=self.TIMEOUT, metadata=self._credentials.metadata
            )
        except grpc.RpcError as exc:
            raise rpc_error(exc, self.address, self._credentials) from None
