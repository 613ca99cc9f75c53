"""``mpcompat run [--start-method METHOD] -- COMMAND ...``: run a command with mpcompat active.

``mpcompat/_startup`` goes first on PYTHONPATH: its ``sitecustomize`` activates mpcompat in every
Python process of the command, then runs the one it shadows. ``--start-method`` makes that
method multiprocessing's default there (the start method itself stays unset, so code may still
set one). The exit code is the command's.
"""
import os
import sys

from mpcompat.autostart import PACKAGE_PARENT, site_dirs

START_METHOD_VAR = "MPCOMPAT_RUN_START_METHOD"  # read by mpcompat/_startup/sitecustomize.py
STARTUP_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_startup")


def add_arguments(parser):
    """Add ``--start-method`` and the command to ``parser``."""
    import argparse
    parser.add_argument(
        "--start-method", choices=("spawn", "forkserver", "fork"),
        help="make this multiprocessing's default start method in every process of the "
             "command (spawn shows on Linux the failures macOS and Windows users get)")
    # Not dest="command": the top-level parser keeps the subcommand's name there.
    parser.add_argument("argv", metavar="COMMAND", nargs=argparse.REMAINDER,
                        help="the command to run and its arguments, after '--'")


def main(args):
    """Run ``args.argv`` in the environment :func:`command_env` builds; return its exit code."""
    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        sys.stderr.write("mpcompat run: no command given (mpcompat run [--start-method M] -- "
                         "COMMAND ...)\n")
        return 2
    if args.start_method:
        import multiprocessing
        available = multiprocessing.get_all_start_methods()
        if args.start_method not in available:
            sys.stderr.write("mpcompat run: start method %r is not available here (available: "
                             "%s)\n" % (args.start_method, ", ".join(available)))
            return 2
    env = command_env(os.environ, args.start_method)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if os.name == "posix":
            os.execvpe(command[0], command, env)  # the command takes over this process
        import subprocess
        return subprocess.call(command, env=env)
    except OSError as exc:
        sys.stderr.write("mpcompat run: cannot run %r: %s\n" % (command[0], exc.strerror or exc))
        return 127 if isinstance(exc, FileNotFoundError) else 126


def command_env(environ, start_method=None):
    """A copy of ``environ`` that activates mpcompat in every Python process started with it:
    PYTHONPATH gets the start-up directory, then mpcompat's parent unless it is a site
    directory (which would come before the standard library there)."""
    env = dict(environ)
    # Empty entries stay: they stand for the working directory.
    entries = env["PYTHONPATH"].split(os.pathsep) if env.get("PYTHONPATH") else []
    known = {os.path.realpath(p) for p in entries if p}
    known.update(os.path.realpath(d) for d in site_dirs())  # never put on PYTHONPATH
    front = [p for p in (STARTUP_DIR, PACKAGE_PARENT) if os.path.realpath(p) not in known]
    if front:
        env["PYTHONPATH"] = os.pathsep.join(front + entries)
    if start_method:
        env[START_METHOD_VAR] = start_method
    return env


def default_start_method(method):
    """Make ``method`` multiprocessing's default start method here, as if this platform
    defaulted to it: the start method stays unset (``set_start_method`` works without
    ``force``); torch uses this default too."""
    from mpcompat import activation

    def apply(context):
        try:  # private names, the same on Python 3.8 to 3.14
            context._default_context._default_context = context._concrete_contexts[method]
        except Exception as exc:  # the hook would drop it silently
            if sys.stderr is not None:
                sys.stderr.write("mpcompat run: could not make %r the default start method "
                                 "(%s: %s)\n" % (method, type(exc).__name__, exc))
    if "multiprocessing.context" in sys.modules:
        apply(sys.modules["multiprocessing.context"])
    else:
        activation.watch("multiprocessing.context", apply)
