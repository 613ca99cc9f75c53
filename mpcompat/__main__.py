"""``python -m mpcompat``: see mpcompat.cli.main."""
import sys

from mpcompat.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
