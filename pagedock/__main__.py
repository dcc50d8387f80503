"""`python -m pagedock serve ...`, the same as the `pagedock` command."""

import sys

from pagedock.cli import main

if __name__ == "__main__":
    sys.exit(main())
