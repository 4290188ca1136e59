"""For this project's test only: who imports its workflows.py and activities.py. This
project may, and Temporal's sandbox (it imports the workflows again for each run);
durafact never may: its own `import workflows` once found this project's file in place
of its own (tests/test_user_project.py reads foreign-imports.log)."""

import sys

HERE = __file__.rpartition("/")[0]


def note_importer(module: str) -> None:
    """Log who imports `module` (the caller) unless it is this project or the sandbox."""
    frame = sys._getframe(2)
    while frame.f_code.co_filename.startswith("<frozen"):  # importlib's own frames
        frame = frame.f_back
    by = frame.f_code.co_filename
    if not by.startswith((HERE, "<")) and "workflow_sandbox" not in by:
        with open(f"{HERE}/foreign-imports.log", "a") as log:
            log.write(f"{module} imported by {by}\n")
