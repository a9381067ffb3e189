"""Who may call what: worker and API tokens, the server's auth interceptor, client credentials (TLS).

The code is ``auth`` (tokens from a flag, the environment or a file; the interceptor's table
of which role calls which method; a client's token and CA bundle). The server adds tenants'
tokens on top (``flux.server.callers``), the gateway checks the same tokens from HTTP headers
(``gateway.security``).
"""

from flux.security.auth import (
    LOOPBACK_HOSTS,
    OPEN,
    REQUIRED,
    STATE_DIR,
    TLS_HINT,
    AuthInterceptor,
    Credentials,
    Refiner,
    Role,
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

__all__ = [
    "LOOPBACK_HOSTS", "OPEN", "REQUIRED", "STATE_DIR", "TLS_HINT", "AuthInterceptor", "Credentials",
    "Refiner", "Role", "Tokens", "bearer", "call_metadata", "caller_token", "check", "is_loopback",
    "new_token", "plaintext_warning", "server_token", "speaks_tls", "token_file",
]  # fmt: skip
