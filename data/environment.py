"""Start-up check of the third-party modules a data tool needs (standard library only, so it runs first).

A user who runs a tool with a Python that lacks them (e.g. the system python3, while the quick start
installed everything into ./.venv) gets one line saying what is missing and how to run the tool in the
quick start's environment, instead of a traceback from deep inside an import.
"""

import importlib
import sys


def require_modules(tool: str, script: str, modules) -> None:
    """Import each of `modules`; on failure print one line on stderr and exit with status 1."""
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            missing.append((module, error))
    if not missing:
        return
    names = ", ".join(module for module, _ in missing)
    # An installed module that fails to import (a broken or mismatched install) says why; an absent one need not.
    details = "; ".join(
        f"{module}: {error}" for module, error in missing
        if not (isinstance(error, ModuleNotFoundError) and error.name == module)
    )
    why = f" ({details})" if details else ""
    print(
        f"{tool}: error: this Python ({sys.executable}) cannot import {names}{why}. Run the tool in the quick "
        f"start's environment: tools/py {script} ... (./run.sh or ./test.sh sets it up), or install the "
        f"requirements: {sys.executable} -m pip install -r requirements.txt",
        file=sys.stderr,
    )
    sys.exit(1)
