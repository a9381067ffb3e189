"""The handlers of the ``flux`` commands, one module per command group.

``start``      flux start server|gateway|worker
``workflow``   flux workflow register|run|status|cancel|list|show (``many``: run --many)
``execution``  flux execution list|show|explain
``workers``    flux workers list; flux worker pause|resume|forget
``status``     flux status
``tenants``    flux tenant …; flux token create
``tokens``     flux token show
``pools``      flux pool apply|list|show

Each handler takes the parsed ``argparse.Namespace`` and returns the exit status;
``flux.cli.parser`` sets it as its parser's ``run``.
"""
