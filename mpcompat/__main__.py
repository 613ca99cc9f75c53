"""``python -m mpcompat``: see mpcompat.cli."""
import sys

from mpcompat.cli import main

if __name__ == "__main__":
    sys.exit(main())
