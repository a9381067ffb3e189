"""Who a token speaks for, in a module of its own without grpc: the CLI's parser offers these roles
before a server or worker process has imported grpc, which it must import only once it has chosen
how grpc polls (flux/grpc_io.py)."""

from __future__ import annotations

from enum import Enum


class Role(Enum):
    WORKER = "worker"
    CLIENT = "api"

    @property
    def env(self) -> str:
        return f"FLUX_{self.value.upper()}_TOKEN"

    @property
    def file_env(self) -> str:
        """The variable naming a file that holds the token (a mounted Secret), e.g. FLUX_API_TOKEN_FILE."""
        return f"{self.env}_FILE"

    @property
    def filename(self) -> str:
        return f"{self.value}.token"
