"""Earlier runs for the leftovers tests: :func:`leave` starts ``earlier_run.py`` as a shell
starts a command (a session and process group of its own) and kills it once its worker holds
what it was asked to, leaving the worker an orphan."""
import contextlib
import os
import select
import signal
import subprocess
import sys

from testenv import child_env

EARLIER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "earlier_run.py")


class Leftover(object):
    """A worker left by a run: ``run`` (the run's pid), ``pid``, ``port``, ``command``."""

    def __init__(self, run, pid, port, command):
        self.run, self.pid, self.port, self.command = run, pid, port, command


@contextlib.contextmanager
def leave(*args, **kwargs):
    """Yield the :class:`Leftover` of ``earlier_run.py *args``; with ``kill_run=False`` the run
    stays alive (its worker is no orphan), with ``session=False`` it stays in this process's
    group. Every process it started is killed on exit."""
    run = subprocess.Popen([sys.executable, EARLIER] + list(args), stdout=subprocess.PIPE,
                           env=child_env(MPCOMPAT_DISABLE="1"),  # what any run leaves
                           start_new_session=kwargs.get("session", True),
                           universal_newlines=True)
    pid = None
    try:
        ready, _, _ = select.select([run.stdout], [], [], 120)
        assert ready, "the earlier run's worker did not start in 120 s"
        pid, port = (int(word) for word in run.stdout.readline().split())
        if kwargs.get("kill_run", True):
            run.kill()
            run.wait()
        yield Leftover(run.pid, pid, port, " ".join([sys.executable, EARLIER] + list(args)))
    finally:
        for victim in (pid, run.pid):
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(victim, signal.SIGKILL)
        run.wait()
        run.stdout.close()
