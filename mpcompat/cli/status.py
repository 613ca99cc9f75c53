"""``mpcompat status``: print the status report."""


def main(args):
    """Print ``mpcompat.status()``."""
    import mpcompat
    print(mpcompat.status())
    return 0
