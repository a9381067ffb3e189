"""Reading a workflow file for ``flux workflow register``, without running it.

- ``declarations``: the ``@workflow`` decorators read from the file's syntax tree.
- ``loader``: a file's workflows collected (or, only when allowed, the file imported).
"""

from flux.registration.declarations import NotStatic, read_declarations
from flux.registration.loader import WorkflowFile, load_workflow_file

__all__ = ["NotStatic", "WorkflowFile", "load_workflow_file", "read_declarations"]
