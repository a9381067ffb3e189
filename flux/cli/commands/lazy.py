"""A command's handler, imported when the command runs, not when the parser is built.

Each command loads only what it needs: ``flux start worker`` the worker, not the client, the
server or the renderers of every listing (about 80 ms of CPU per worker process, which four
workers starting together on two cores pay at once), and ``flux --help`` none of them.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

Handler = Callable[[argparse.Namespace], "int | None"]


class command:  # noqa: N801 - used where a handler function was named
    """``flux.cli.commands.<module>.<name>``, loaded on the first call."""

    def __init__(self, module: str, name: str):
        self.module = f"flux.cli.commands.{module}"
        self.__name__ = name  # main.py names the process's role after it (start_worker → worker)

    def load(self) -> Handler:
        handler: Handler = getattr(importlib.import_module(self.module), self.__name__)
        return handler

    def __call__(self, args: argparse.Namespace) -> int | None:
        return self.load()(args)
