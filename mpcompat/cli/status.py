"""``mpcompat status``: print the status report."""


def add_arguments(parser):
    """No options."""


def main(args):
    """Print ``mpcompat.status()``."""
    import mpcompat
    print(mpcompat.status())
    return 0
