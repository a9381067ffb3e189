"""``flux token show [worker|api]``: the tokens a server generated into ``./.flux/``.

The server prints only where it wrote them, never the tokens themselves (its
output is what log collectors keep); this prints one on request, on stdout
alone, for ``$(flux token show worker)``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flux.auth import STATE_DIR, Role
from flux.cli.tenants import add_token_create

_ROLES = {role.value: role for role in Role}


def add_command(
    commands: Any, with_server: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
) -> None:
    token = commands.add_parser(
        "token", help="the tokens the server generated in ./.flux/, and tenants' tokens"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    add_token_create(token, with_server)
    show = token.add_parser(
        "show",
        help="print a generated token (run it where the server runs: it reads ./.flux/)",
        description="Print the token the server generated into ./.flux/ on its first start in this "
        "directory: the worker join token, the client API token, or both (labelled) when none is named.",
    )
    show.add_argument("role", nargs="?", choices=tuple(_ROLES), help="which token (default: both, labelled)")
    show.set_defaults(run=_show)


def generated_line(role: Role, path: Path) -> str:
    """What the server prints when it generated ``role``'s token at ``path``: where, never what."""
    return (
        f"generated {role.value} token, written to {path.absolute()} (owner-only); "
        f"print it with: flux token show {role.value}"
    )


def _read(role: Role, state_dir: Path) -> str:
    path = state_dir / role.filename
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        raise ValueError(
            f"no {role.value} token at {path.absolute()}: a server started in this directory without "
            f"--{role.value}-token-file or ${role.env} writes one there; run this where it runs"
        ) from None
    except OSError as exc:
        raise ValueError(f"cannot read {path.absolute()}: {exc.strerror or exc}") from None
    if not token:
        raise ValueError(f"{path.absolute()} is empty")
    return token


def _show(args: argparse.Namespace, state_dir: Path = STATE_DIR) -> int:
    if args.role is not None:
        print(_read(_ROLES[args.role], state_dir))
        return 0
    tokens = [(role.value, _read(role, state_dir)) for role in Role]
    for name, token in tokens:
        print(f"{name}\t{token}")
    return 0
