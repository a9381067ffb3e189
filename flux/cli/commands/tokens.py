"""``flux token show [worker|api]``: the tokens a server generated into ``./.flux/``.

The server prints only where it wrote them, never the tokens themselves (its
output is what log collectors keep); this prints one on request, on stdout
alone, for ``$(flux token show worker)``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flux.security import STATE_DIR, Role


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


def show_token(args: argparse.Namespace, state_dir: Path = STATE_DIR) -> int:
    if args.role is not None:
        print(_read(Role(args.role), state_dir))  # the parser's choices are Role's values
        return 0
    tokens = [(role.value, _read(role, state_dir)) for role in Role]
    for name, token in tokens:
        print(f"{name}\t{token}")
    return 0
