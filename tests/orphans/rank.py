"""A torchrun rank of the orphan scenarios: ``orphans_helpers.wait`` (argv: state, directory)."""
import sys

from orphans_helpers import wait

if __name__ == "__main__":
    wait(sys.argv[1], sys.argv[2])
