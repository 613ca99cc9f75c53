"""Helpers for tests/hang_dump: run scenario scripts and read their hang dumps.

A scenario is a real script run in a child process (its own session, so that a hang never
outlives the test). The script blocks on purpose; the test reads its stderr until the dumps it
expects are there (or a time limit passes), then releases the script through stdin
(:func:`release_on_stdin` in the script), which then finishes normally: nothing was killed.
Scripts import this module too (``tests/`` is on PYTHONPATH in the children).
"""
import os
import re
import signal
import subprocess
import threading
import time

HEADER = re.compile(r"^mpcompat: hang dump (\d+) of process (\d+): the main thread has waited "
                    r"([0-9.]+) s for (.*)$", re.M)
SINCE = re.compile(r"^mpcompat: \((?:no progress since \d\d:\d\d:\d\d\.\d, )?waiting since "
                   r"\d\d:\d\d:\d\d\.\d; MPCOMPAT_HANG_DUMP=([0-9.]+); next dump after "
                   r"([0-9.]+) s without progress; nothing is killed\)$", re.M)
END = re.compile(r"^mpcompat: end of hang dump (\d+) of process (\d+)$", re.M)


def release_on_stdin(release):
    """In a scenario script: call ``release()`` once a byte (or EOF) arrives on stdin.

    Reads the file descriptor, not ``sys.stdin``: a thread blocked in ``sys.stdin.readline()``
    holds the buffer's lock, and a child forked meanwhile deadlocks when multiprocessing closes
    its stdin."""
    def wait():
        os.read(0, 1)
        release()
    thread = threading.Thread(target=wait, name="release-on-stdin")
    thread.daemon = True
    thread.start()


def line_of(path, marker):
    """The 1-based number of the line of ``path`` that contains ``marker`` (exactly one)."""
    with open(path) as f:
        found = [i + 1 for i, line in enumerate(f) if marker in line]
    assert len(found) == 1, (path, marker, found)
    return found[0]


class Scenario(object):
    """A scenario script running in a child process, its output read as it comes."""

    def __init__(self, python, script, args=(), env=None, cwd=None):
        self.proc = subprocess.Popen(
            [python, script] + [str(a) for a in args], env=env, cwd=cwd,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
        self.script = script
        self._out, self._err = [], []
        self._readers = [self._reader(self.proc.stdout, self._out),
                         self._reader(self.proc.stderr, self._err)]
        self.released_after = None
        self.started = time.monotonic()

    @staticmethod
    def _reader(stream, sink):
        def read():
            for chunk in iter(lambda: stream.read1(65536) if hasattr(stream, "read1")
                              else stream.read(1), b""):
                sink.append(chunk)
        thread = threading.Thread(target=read)
        thread.daemon = True
        thread.start()
        return thread

    @property
    def stderr(self):
        """The stderr read so far, as text."""
        return b"".join(self._err).decode("utf-8", "replace")

    @property
    def stdout(self):
        """The stdout read so far, as text."""
        return b"".join(self._out).decode("utf-8", "replace")

    def release_when(self, ready=None, limit=60.0):
        """Release the script once ``ready(stderr)`` is true, or after ``limit`` seconds.

        Returns whether ``ready`` was met (always False without one)."""
        deadline = self.started + limit
        met = False
        while time.monotonic() < deadline and self.proc.poll() is None:
            if ready is not None and ready(self.stderr):
                met = True
                break
            time.sleep(0.05)
        self.released_after = time.monotonic() - self.started
        try:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.close()
        except OSError:
            pass
        return met

    def finish(self, timeout=60.0):
        """Wait for the script to end (kill its whole session after ``timeout``); return
        ``(returncode, stdout, stderr)``."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait(10)
        for reader in self._readers:
            reader.join(10)
        return self.proc.returncode, self.stdout, self.stderr

    def kill(self):
        """Kill the script's session (the script and every worker it started)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass


def scenario_env(hang_dump):
    """A child environment where mpcompat activates in every process (as ``mpcompat run``
    makes it), with MPCOMPAT_HANG_DUMP set to ``hang_dump`` (None: unset)."""
    from mpcompat.cli.launcher import command_env
    from testenv import child_env
    return command_env(child_env(MPCOMPAT_HANG_DUMP=hang_dump, MPCOMPAT_WARNED=None))


def run_to_end(path, hang_dump, timeout=120):
    """Run the scenario script at ``path`` (a pathlib.Path) to its end, in its directory;
    return ``(returncode, stdout, stderr)``. Killed if it outlasts ``timeout``."""
    import sys
    scenario = Scenario(sys.executable, str(path), env=scenario_env(hang_dump),
                        cwd=str(path.parent))
    try:
        return scenario.finish(timeout=timeout)
    finally:
        scenario.kill()


def run_side_by_side(root, scenarios, release):
    """Start every scenario of ``scenarios`` ({name: (source, args, hang_dump)}) at once, each
    written as a script under ``root`` (a pathlib.Path); then, one after the other,
    ``release(name, scenario, path)`` releases each (returning whether what it waited for came)
    and the script runs to its end. Return {name: (met, rc, stdout, stderr, path)}. Every
    scenario's session is killed at the end, whatever happened."""
    import sys
    started = {}
    try:
        for name, (source, args, hang_dump) in scenarios.items():
            path = root / (name.replace("-", "_") + ".py")
            path.write_text(source)
            started[name] = (Scenario(sys.executable, str(path), args,
                                      env=scenario_env(hang_dump), cwd=str(root)), str(path))
        results = {}
        for name, (scenario, path) in started.items():
            met = release(name, scenario, path)
            results[name] = (met,) + scenario.finish(timeout=60) + (path,)
        return results
    finally:
        for scenario, _ in started.values():
            scenario.kill()


def dumps(text, pid=None):
    """The hang dumps in ``text``: ``[(number, pid, waited seconds, what, section text)]``.

    The section runs from a dump's header to the next header (or the end of ``text``), so it
    holds what the workers wrote after the waiting process's part."""
    found = []
    headers = list(HEADER.finditer(text))
    for i, match in enumerate(headers):
        if pid is not None and int(match.group(2)) != pid:
            continue
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        found.append((int(match.group(1)), int(match.group(2)), float(match.group(3)),
                      match.group(4), text[match.start():end]))
    return found


def complete_dumps(text):
    """The numbers of the dumps whose end line has been written."""
    return [int(m.group(1)) for m in END.finditer(text)]


def waiting_stack(section):
    """The waiting thread's stack in a dump section (this process's own part)."""
    start = section.index("(the waiting thread), most recent call last:")
    end = section.find("\nmpcompat: ", start)
    return section[start:end if end >= 0 else len(section)]


def worker_part(section, pid_label):
    """What a worker wrote in a dump section, after the header naming ``pid_label``
    (e.g. ``"(Pool worker"``), up to the next mpcompat line."""
    start = section.index(pid_label)
    start = section.index("\n", start) + 1
    end = section.find("\nmpcompat: ", start - 1)
    return section[start:end if end >= 0 else len(section)]


def backoff_holds(found, seconds=1.0):
    """Whether the dumps ``found`` (from :func:`dumps`, one process) back off: within each wait
    (a run of growing waited times; a new wait or progress starts a new run) the n-th dump
    comes after at least 2**(n-1) * ``seconds`` without progress."""
    previous, n = None, 0
    for _, _, waited, _, _ in found:
        n = n + 1 if previous is not None and waited > previous else 0
        if waited < 2 ** n * seconds - 0.05:
            return False
        previous = waited
    return True


_WORKER_STACK = re.compile(r"^mpcompat: worker pid (\d+) \(([^\n]*)\), most recent call last:$",
                           re.M)
_SAME_STACK = re.compile(r"^mpcompat: worker pid (\d+) \((.*)\): the same stack as worker pid "
                         r"(\d+) ", re.M)


def stuck_workers(section, label, path, line):
    """The pids of the workers whose label starts with ``label`` (e.g. "Pool worker") that a
    dump section shows stuck on ``path``, line ``line``: with their own stack, or as "the same
    stack as" a worker shown so."""
    stuck = set()
    for match in _WORKER_STACK.finditer(section):
        end = section.find("\nmpcompat: ", match.end())
        stack = section[match.end():end if end >= 0 else len(section)]
        if match.group(2).startswith(label) and \
                'File "%s", line %d, in ' % (path, line) in stack:
            stuck.add(int(match.group(1)))
    for match in _SAME_STACK.finditer(section):
        if match.group(2).startswith(label) and int(match.group(3)) in stuck:
            stuck.add(int(match.group(1)))
    return stuck


def repeat_says_what_changed(section, number):
    """Whether dump ``number`` (a repeat) says what changed since the previous, or that
    nothing did."""
    return ("mpcompat: nothing changed since hang dump %d: the same stacks" % (number - 1)
            in section) or ("mpcompat: changed since hang dump %d: " % (number - 1) in section)
