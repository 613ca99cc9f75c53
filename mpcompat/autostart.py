"""Auto-activation at interpreter start: where its hook is, whether it is on, what it did here.

A wheel puts ``mpcompat.pth`` (and, for Python 3.15+, ``mpcompat.start``) in site-packages,
both calling the top-level ``_mpcompat_bootstrap``. The on/off state lives in these files (so
start-up reads nothing more, ``pip uninstall`` removes it, and a reinstall turns it on).
"""
import os
import sys

PTH_NAME = "mpcompat.pth"
START_NAME = "mpcompat.start"
# 'mpcompat disable' puts this in front of every line of both files, 'mpcompat enable' takes it
# off again: the files are then byte for byte what was installed (their RECORD hashes match).
OFF = "# turned off by 'mpcompat disable', 'mpcompat enable' turns it back on: "
# The directory mpcompat is imported from (site-packages, or a source checkout).
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def site_dirs():
    """Return this interpreter's site directories (where ``.pth`` files are processed)."""
    import site
    dirs = list(getattr(site, "getsitepackages", lambda: [])())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return dirs


def hook_dirs():
    """Return the site directories that hold an ``mpcompat.pth``, the package's own one first."""
    found, seen = [], set()
    for directory in [PACKAGE_PARENT] + site_dirs():
        real = os.path.realpath(directory)
        if real not in seen and os.path.isfile(os.path.join(directory, PTH_NAME)):
            found.append(directory)
        seen.add(real)
    return found


def hook_file(site_dir):
    """The start-up file of ``site_dir`` that this Python runs: ``mpcompat.start`` from 3.15
    (which then ignores ``mpcompat.pth``'s import line), else ``mpcompat.pth``."""
    start = os.path.join(site_dir, START_NAME)
    if sys.version_info >= (3, 15) and os.path.isfile(start):
        return start
    return os.path.join(site_dir, PTH_NAME)


def is_enabled(site_dir):
    """Whether ``site_dir``'s ``mpcompat.pth`` calls the start-up hook (False if unreadable)."""
    try:
        with open(os.path.join(site_dir, PTH_NAME)) as f:
            return any(line.startswith("import") and "_mpcompat_bootstrap" in line for line in f)
    except OSError:
        return False


def set_enabled(site_dir, enabled):
    """Turn the start-up hook in ``site_dir`` on (as installed) or off (every line a comment)."""
    for name in (PTH_NAME, START_NAME):
        path = os.path.join(site_dir, name)
        if not os.path.exists(path):
            continue  # (mpcompat.start: installed by a build without it)
        with open(path) as f:
            lines = [line[len(OFF):] if line.startswith(OFF) else line
                     for line in f.read().splitlines(True)]
        # Written beside it and renamed over it: an interpreter starting meanwhile reads the
        # old file or the new one, never half of one (and site ignores a name not ending .pth).
        tmp = "%s.%d.tmp" % (path, os.getpid())
        try:
            with open(tmp, "w") as f:
                f.write("".join(lines if enabled else [OFF + line for line in lines]))
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


def environment():
    """``(state, line)``: auto-activation at interpreter start is ``"on"``, ``"off"`` or
    ``"none"`` (no start-up hook installed) here; the line, for status(), says where and how."""
    dirs = hook_dirs()
    if not dirs:
        boot = sys.modules.get("_mpcompat_bootstrap")
        if "mpcompat run" in (getattr(boot, "calls", None) or ()):
            return "none", ("not installed (mpcompat is imported from %s), but 'mpcompat run' "
                            "activates it in every process of its command" % PACKAGE_PARENT)
        return "none", ("not installed: mpcompat is imported from %s, not from a wheel, so each "
                        "process activates it by importing it (or run it under 'mpcompat run')"
                        % PACKAGE_PARENT)
    paths = ", ".join(hook_file(d) for d in dirs)
    if not any(is_enabled(d) for d in dirs):
        return "off", ("off for this environment by 'mpcompat disable' (%s): new Python "
                       "processes start without mpcompat; 'mpcompat enable' turns it back on"
                       % paths)
    line = "on for this environment (%s)" % paths
    from mpcompat import activation
    if activation.env_disabled():
        line += ", but MPCOMPAT_DISABLE=%s keeps mpcompat off in this process tree" % (
            os.environ["MPCOMPAT_DISABLE"].strip())
    elif os.environ.get("MPCOMPAT_AUTOSTART_FAILED"):  # set by _mpcompat_bootstrap
        line += (", but it failed in this process tree (%s): its processes start without it"
                 % os.environ["MPCOMPAT_AUTOSTART_FAILED"])
    return "on", line

