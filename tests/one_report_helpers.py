"""Helpers for ``tests/one_report`` (issue 26): run a user's script as an installed mpcompat
would (activated at interpreter start, in the script and in every child), read its whole output
as a user does (stdout and stderr interleaved), and check what that output names.

Keep this module importable without pytest or torch: scripts import it.
"""
import os
import subprocess
import sys

from testenv import REPO, TESTS, child_env

STARTUP = os.path.join(REPO, "mpcompat", "_startup")
OWN_FILES = os.path.join(REPO, "mpcompat") + os.sep


def run_user_script(tmp_path, source, *args, **kwargs):
    """Write ``source`` to ``tmp_path/script.py`` and run it with this interpreter, mpcompat
    activated at start-up (its ``_startup`` hook on PYTHONPATH; ``installed=False``: not at
    all), in ``tmp_path``, in a session of its own (a timeout kills its workers too). kwargs:
    ``timeout`` (s, default 120) and environment overrides. Returns ``(returncode, lines)``:
    stdout and stderr together, as they were written."""
    from pool_workers_helpers import finish
    timeout = kwargs.pop("timeout", 120)
    path = [REPO, TESTS] + ([STARTUP] if kwargs.pop("installed", True) else [])
    kwargs.setdefault("PYTHONPATH", os.pathsep.join(path))
    script = os.path.join(str(tmp_path), "script.py")
    with open(script, "w") as fh:
        fh.write(source)
    child = subprocess.Popen([sys.executable, script] + [str(a) for a in args],
                             env=child_env(**kwargs), cwd=str(tmp_path), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, universal_newlines=True,
                             start_new_session=True)
    proc = finish(child, timeout)
    return proc.returncode, proc.stdout.splitlines()


def own_lines(lines):
    """The lines that name a file of mpcompat (a frame of its code)."""
    return [line for line in lines if OWN_FILES in line]


def first_index(lines, text):
    """The index of the first line holding ``text``, or None."""
    return next((i for i, line in enumerate(lines) if text in line), None)
