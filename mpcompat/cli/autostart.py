"""``mpcompat enable`` / ``mpcompat disable``: auto-activation at interpreter start, for the
whole environment, kept until changed (reinstalling mpcompat turns it back on)."""
import sys


def main(args):
    """Turn the start-up hook of this environment on (``enable``) or off (``disable``)."""
    from mpcompat import autostart
    enable = args.command == "enable"
    dirs = autostart.hook_dirs()
    if not dirs:
        sys.stderr.write(
            "mpcompat %s: no %s in this environment's site-packages: mpcompat was not installed "
            "from a wheel here (it is imported from %s). 'mpcompat run' and MPCOMPAT_DISABLE=1 "
            "work without it.\n" % (args.command, autostart.PTH_NAME, autostart.PACKAGE_PARENT))
        return 1
    for site_dir in dirs:
        try:
            autostart.set_enabled(site_dir, enable)
        except OSError as exc:
            sys.stderr.write("mpcompat %s: cannot change the start-up hook in %s: %s\n"
                             % (args.command, site_dir, exc))
            return 1
        print("mpcompat: auto-activation at interpreter start is %s for %s" % (
            "on" if enable else "off", site_dir))
    return 0
