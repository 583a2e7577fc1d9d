"""`torchdev-lint server`: start the language server, or say which extra to install.

Only this module is imported without the extra, so linting alone keeps
needing only libcst and flake8.
"""

from __future__ import annotations

import sys

EXIT_ERROR = 2


def run() -> int:
    """Serve one client over stdin/stdout until it says `exit` or closes stdin."""
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError as error:
        print(
            f"torchdev-lint: error: the language server needs the [lsp] extra ({error.name} is missing): "
            "pip install 'torchdev-lint[lsp]'",
            file=sys.stderr,
        )
        return EXIT_ERROR
    from torchdev_lint.server.app import serve

    return serve()
