"""Who may call what: a worker join token and a client API token.

Workers present the worker token, clients the API token, both as
``authorization: Bearer <token>`` (gRPC metadata or HTTP header). Tokens come
from a flag, the environment (``FLUX_WORKER_TOKEN``, ``FLUX_API_TOKEN``) or a
file (``--worker-token-file``, ``--api-token-file``, or the path in
``FLUX_WORKER_TOKEN_FILE``, ``FLUX_API_TOKEN_FILE``: a mounted Secret that
``flux`` run in the pod finds without a flag); a server with none generates both on first start and keeps them under
``./.flux/`` readable by its owner only (it prints where, not what; ``flux
token show`` prints them), where clients and workers started in the same
directory find them. Comparisons are constant-time
and tokens never reach a log line.
"""

from __future__ import annotations

import hmac
import os
import secrets
import socket
import ssl
import string
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from flux.security.roles import Role

STATE_DIR = Path(".flux")


@dataclass(frozen=True, slots=True)
class Tokens:
    worker: str
    api: str

    def role_of(self, token: str) -> Role | None:
        # Both comparisons always run, so timing does not tell which kind matched.
        worker = hmac.compare_digest(token.encode(), self.worker.encode())
        api = hmac.compare_digest(token.encode(), self.api.encode())
        return Role.WORKER if worker else Role.CLIENT if api else None


def _read(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read token file {str(path)!r}: {exc.strerror or exc}") from None
    if not token:
        raise ValueError(f"token file {path} is empty")
    return token


def _read_named(role: Role) -> str:
    """The token in the file ``$FLUX_<ROLE>_TOKEN_FILE`` names; an error says which variable pointed there."""
    try:
        return _read(Path(os.environ[role.file_env]))
    except ValueError as exc:
        raise ValueError(f"{role.file_env}: {exc}") from None


def token_file(path: str) -> str:
    """The token a file holds (``--metrics-token-file``); ValueError naming the file when it has none."""
    return _read(Path(path))


def _write_private(path: Path, token: str) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)  # also when the file existed with looser bits


def server_token(
    role: Role, flag: str | None, file: str | None, state_dir: Path = STATE_DIR
) -> tuple[str, bool]:
    """The server's token for ``role`` and whether it was generated just now."""
    if flag:
        return flag, False
    if file:
        return _read(Path(file)), False
    if os.environ.get(role.env):
        return os.environ[role.env], False
    if os.environ.get(role.file_env):
        return _read_named(role), False
    stored = state_dir / role.filename
    if stored.exists():
        return _read(stored), False
    token = new_token()
    _write_private(stored, token)
    return token, True


def new_token() -> str:
    """A random url-safe token that never starts with "-" (which ``--worker-token $T`` reads as a flag)."""
    return secrets.choice(string.ascii_letters + string.digits) + secrets.token_urlsafe(32)


def caller_token(
    role: Role, flag: str | None = None, file: str | None = None, state_dir: Path = STATE_DIR
) -> str:
    """What a worker or client presents: flag, file, environment (token, then file), then ``./.flux/``; "" if none."""
    if flag:
        return flag
    if file:
        return _read(Path(file))
    if os.environ.get(role.env):
        return os.environ[role.env]
    if os.environ.get(role.file_env):
        return _read_named(role)
    stored = state_dir / role.filename
    return _read(stored) if stored.exists() else ""


def bearer(metadata: object) -> str:
    """The token of an ``authorization: Bearer …`` entry (scheme in any case, RFC 9110), or ""."""
    for key, value in metadata or ():  # type: ignore[attr-defined]
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return ""


# Which role each service requires; anything else (health, reflection) is open.
REQUIRED = {
    "/flux.v1.WorkerService/": Role.WORKER,
    "/flux.v1.ControlService/": Role.CLIENT,
    "/flux.v1.PoolService/": Role.CLIENT,
    "/flux.v1.TenantService/": Role.CLIENT,
    "/flux.v1.LimitService/": Role.CLIENT,
    "/flux.v1.BatchService/": Role.CLIENT,
    "/flux.v1.ScheduleService/": Role.CLIENT,
}
# Methods of those services open to anyone, as health is: GetMetrics answers only
# aggregate numbers (no names, labels or ids; pool names, which an operator chose, label
# flux_pool_demand_workers), what Prometheus scrapes without a token.
OPEN = frozenset({"/flux.v1.ControlService/GetMetrics"})


def check(tokens: Tokens, method: str, token: str) -> tuple[grpc.StatusCode, str] | None:
    """None when allowed; else the status and a message that names what is wrong (never the token)."""
    required = next((role for prefix, role in REQUIRED.items() if method.startswith(prefix)), None)
    if required is None or method in OPEN:
        return None
    if not token:
        return grpc.StatusCode.UNAUTHENTICATED, (
            f"missing credentials: send 'authorization: Bearer <{required.value} token>' "
            f"(set {required.env}, or {required.file_env} to a file holding it, or run where "
            f"./.flux/{required.filename} exists)"
        )
    role = tokens.role_of(token)
    if role is None:
        return grpc.StatusCode.UNAUTHENTICATED, f"invalid {required.value} token"
    if role is not required:
        return (
            grpc.StatusCode.PERMISSION_DENIED,
            f"the {role.value} token cannot call {method}; use the {required.value} token",
        )
    return None


class Refiner(Protocol):
    """Tokens beyond the server's two (flux.server.callers: tenants' tokens and their roles)."""

    async def refine(
        self, refusal: tuple[grpc.StatusCode, str] | None, method: str, token: str
    ) -> tuple[grpc.StatusCode, str] | None: ...


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, tokens: Tokens, refiner: Refiner | None = None):
        self.tokens = tokens
        self.refiner = refiner

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        token = bearer(details.invocation_metadata)
        refusal = check(self.tokens, details.method, token)
        if self.refiner is not None:
            refusal = await self.refiner.refine(refusal, details.method, token)
        handler = await continuation(details)
        if refusal is None or handler is None:
            return handler
        code, message = refusal

        async def deny_unary(request: object, context: grpc.aio.ServicerContext) -> None:
            await context.abort(code, message)

        async def deny_stream(request: object, context: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
            await context.abort(code, message)
            yield  # pragma: no cover - makes this an async generator, as stream handlers are

        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                deny_stream, handler.request_deserializer, handler.response_serializer
            )
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(
                deny_stream, handler.request_deserializer, handler.response_serializer
            )
        return grpc.unary_unary_rpc_method_handler(
            deny_unary, handler.request_deserializer, handler.response_serializer
        )


def call_metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def plaintext_warning(host: str) -> str:
    """The warning for serving without TLS on ``host``; "" on loopback, where nobody else listens."""
    if is_loopback(host):
        return ""
    return (
        f"serving without TLS on {host or 'every address'}: bearer tokens and session tokens cross the "
        "network in clear text; pass --tls-cert and --tls-key, or put a TLS proxy in front"
    )


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a client or worker presents: a bearer token, and a CA bundle when the server speaks TLS."""

    token: str = ""
    ca: str | None = None

    @classmethod
    def for_role(
        cls, role: Role, token: str | None = None, ca: str | None = None, token_file: str | None = None
    ) -> Credentials:
        return cls(caller_token(role, token, token_file), ca or os.environ.get("FLUX_CA") or None)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return call_metadata(self.token)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _tls(self) -> grpc.ChannelCredentials | None:
        if self.ca is None:
            return None
        try:
            return grpc.ssl_channel_credentials(Path(self.ca).read_bytes())
        except OSError as exc:
            raise ValueError(f"--ca {self.ca!r} cannot be read: {exc}") from None

    def channel(self, address: str, options: list[tuple[str, object]] | None = None) -> grpc.Channel:
        tls = self._tls()
        if tls is None:
            return grpc.insecure_channel(address, options=options)
        return grpc.secure_channel(address, tls, options=options)

    def aio_channel(self, address: str, options: list[tuple[str, object]] | None = None) -> grpc.aio.Channel:
        tls = self._tls()
        if tls is None:
            return grpc.aio.insecure_channel(address, options=options)
        return grpc.aio.secure_channel(address, tls, options=options)


TLS_HINT = "it looks like a TLS server: pass its CA bundle with --ca (or $FLUX_CA)"


def speaks_tls(address: str, timeout: float = 2.0) -> bool:
    """Whether ``address`` completes a TLS handshake: why a plaintext channel to it got nowhere.

    Only asked after a plaintext call failed, to turn "Socket closed" into advice. The
    certificate is not checked: this learns the protocol, it trusts nothing.
    """
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return False
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout) as raw,
            context.wrap_socket(raw),
        ):
            return True
    except (OSError, ValueError):
        return False
