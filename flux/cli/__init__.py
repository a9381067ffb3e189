"""The ``flux`` command (DESIGN §6).

``main`` (the ``flux`` script, ``python -m flux``) is in ``flux.cli.main``; the argparse
tree in ``flux.cli.parser``; each command group's handlers in ``flux.cli.commands``;
what they print in ``flux.cli.render``. Modules here import a name from the module
that defines it, never from this package: it imports them all (through ``main``).
"""

from flux.cli.main import main

__all__ = ["main"]
