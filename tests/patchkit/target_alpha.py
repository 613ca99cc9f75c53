"""A target module for the machinery tests: the patch under test changes ``answer``."""


def answer():
    """The unpatched answer."""
    return 41
