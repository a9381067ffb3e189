"""Who may call what: worker and API tokens, the server's auth interceptor, client credentials (TLS).

The code is ``auth`` (tokens from a flag, the environment or a file; the interceptor's table
of which role calls which method; a client's token and CA bundle). The server adds tenants'
tokens on top (``flux.server.callers``), the gateway checks the same tokens from HTTP headers
(``gateway.security``).
"""

from typing import TYPE_CHECKING

from flux.security.roles import Role

if TYPE_CHECKING:
    from flux.security.auth import (
        LOOPBACK_HOSTS,
        OPEN,
        REQUIRED,
        STATE_DIR,
        TLS_HINT,
        AuthInterceptor,
        Credentials,
        Refiner,
        Tokens,
        bearer,
        call_metadata,
        caller_token,
        check,
        is_loopback,
        new_token,
        plaintext_warning,
        server_token,
        speaks_tls,
        token_file,
    )


def __getattr__(name: str) -> object:
    """The names from ``auth`` (which imports grpc), imported when first used: ``Role`` alone must
    come without grpc, for the CLI's parser (roles.py)."""
    if name in __all__:
        from flux.security import auth

        return getattr(auth, name)
    raise AttributeError(f"module 'flux.security' has no attribute {name!r}")


__all__ = [
    "LOOPBACK_HOSTS", "OPEN", "REQUIRED", "STATE_DIR", "TLS_HINT", "AuthInterceptor", "Credentials",
    "Refiner", "Role", "Tokens", "bearer", "call_metadata", "caller_token", "check", "is_loopback",
    "new_token", "plaintext_warning", "server_token", "speaks_tls", "token_file",
]  # fmt: skip
