"""`python -m llm_operator` runs the operator, like `pagedock operator`."""

import sys

from llm_operator.controller.cli import main

if __name__ == "__main__":
    sys.exit(main(None))
