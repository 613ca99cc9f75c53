"""The orphan scenarios (issue 35) shared by ``tests/orphans`` and ``benchmarks/bench_orphans.py``:
a parent starts workers of one kind (Pool, executor, DataLoader, ``Process``,
``torch.multiprocessing.start_processes``, torchrun ranks) with one start method, brings them
into one state (busy in a task, blocked in a pipe write, idle), and dies (SIGKILL, SIGTERM, the
OOM killer of a memory cgroup); the survivors among its descendants are counted 2 s after its
death. All the scenarios of a matrix run at once, each parent in a session of its own.

Keep this module importable without pytest, torch or mpcompat: children import it.
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
GRACE = 2.0  # seconds after the parent's death: every child must have ended by then
KEPT = 10.0  # seconds a child that must not be killed is watched
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM}


class Row(object):
    """One scenario: ``kind`` of workers, start ``method``, ``state`` of the workers as their
    parent dies, ``killer`` (SIGKILL, SIGTERM, OOM) and ``workers``, how many it waits for.
    ``kept``: a false-kill row, whose children must still live ``KEPT`` s after the thread that
    started them ended: "thread" (a thread that ends at once; then the parent is killed, and
    they end with it), "closed" (the parent closes every descriptor it has, their pipes' write
    ends too, and lives on) and "detached" (``MPCOMPAT_OUTLIVE_PARENT=1``: they outlive it)."""

    def __init__(self, kind, method, state, killer, workers=2, kept=False):
        self.kind, self.method, self.state, self.killer = kind, method, state, killer
        self.workers, self.kept = workers, kept

    def __repr__(self):
        return "%s/%s/%s/%s" % (self.kind, self.method, self.state, self.killer)

    @property
    def torch(self):
        """Whether the scenario needs torch."""
        return self.kind in ("dataloader", "mpspawn", "torchrun")


MATRIX = [
    Row("pool", "fork", "busy", "SIGKILL"),
    Row("pool", "spawn", "pipe", "SIGTERM"),
    Row("pool", "forkserver", "busy", "OOM"),
    Row("executor", "fork", "busy+idle", "SIGKILL"),
    Row("executor", "spawn", "busy", "SIGKILL"),
    Row("executor", "forkserver", "pipe", "SIGTERM"),
    Row("dataloader", "fork", "busy", "SIGTERM"),
    Row("dataloader", "spawn", "idle", "SIGKILL"),
    Row("dataloader", "forkserver", "pipe", "SIGKILL"),
    Row("process", "fork", "pipe", "SIGKILL", workers=1),
    Row("process", "spawn", "busy", "OOM", workers=1),
    Row("process", "forkserver", "idle", "SIGKILL", workers=1),
    Row("mpspawn", "fork", "busy", "SIGKILL"),
    Row("mpspawn", "spawn", "idle", "SIGTERM"),
    Row("mpspawn", "forkserver", "pipe", "SIGKILL"),
    Row("torchrun", "-", "busy", "SIGKILL"),
    Row("thread", "fork", "idle", "SIGKILL", workers=1, kept=True),
    Row("detached", "spawn", "idle", "SIGKILL", workers=1, kept=True),
    Row("closed", "fork", "idle", "SIGKILL", workers=1, kept=True),
]
# What the parent of a false-kill row says once its children must be left alone, and the
# rows whose children must live KEPT s while their parent lives.
SETTLED = {"thread": "thread-ended", "closed": "closed"}


# --- run in the workers ------------------------------------------------------------------------

def mark(directory, what):
    """Say that this process reached its state: a file ``<what>-<pid>`` in ``directory``."""
    open(os.path.join(directory, "%s-%d" % (what, os.getpid())), "w").close()


def task(state, directory):
    """A worker's task: "busy" runs Python code till killed, "pipe" blocks writing to a FIFO
    nobody reads (the test holds its read end), "idle" returns at once."""
    if state == "idle":
        return os.getpid()
    mark(directory, "in")
    if state == "pipe":
        fd = os.open(os.path.join(directory, "fifo"), os.O_WRONLY)
        os.write(fd, bytes(1 << 20))
    deadline = time.time() + 300
    while time.time() < deadline:
        sum(range(2000))
        time.sleep(0.002)
    return os.getpid()


def wait(state, directory):
    """A ``Process``'s target: :func:`task`, or for "idle" a wait of its own."""
    if state != "idle":
        return task(state, directory)
    mark(directory, "in")
    time.sleep(300)


def rank(index, state, directory):
    """A ``torch.multiprocessing`` process: :func:`wait`."""
    wait(state, directory)


class Items(object):
    """A DataLoader's dataset whose items are :func:`task` (idle: quick items)."""

    def __init__(self, state, directory):
        self.state, self.directory = state, directory

    def __len__(self):
        return 1000

    def __getitem__(self, index):
        task(self.state, self.directory)
        return index


# --- the parent --------------------------------------------------------------------------------

def _oom_when_told(directory, procs):
    """In the parent: once ``directory/oom-go`` exists, move into the cgroup of ``procs`` and
    allocate until the kernel's OOM killer kills this process."""
    while not os.path.exists(os.path.join(directory, "oom-go")):
        time.sleep(0.02)
    with open(procs, "w") as fh:
        fh.write(str(os.getpid()))
    hoard = []
    while True:
        hoard.append(bytearray(16 << 20))


def parent_main():
    """The parent of one scenario: ``argv``: kind, method, state, directory, cgroup procs file
    (or "-"). Starts its workers and never returns."""
    kind, method, state, directory, procs = sys.argv[1:6]
    if procs != "-":
        threading.Thread(target=_oom_when_told, args=(directory, procs), daemon=True).start()
    import multiprocessing
    context = multiprocessing.get_context(method) if method != "-" else None
    if kind == "pool":
        pool = context.Pool(2)
        pids = set()
        while len(pids) < 2:  # both workers started and idle
            pids.update(pool.starmap(task, [("idle", directory)] * 4, chunksize=1))
        if state == "idle":
            for pid in pids:
                mark(directory, "in-%d" % pid)
        else:
            pool.starmap_async(task, [(state, directory)] * 2, chunksize=1)
    elif kind == "executor":
        import concurrent.futures
        executor = concurrent.futures.ProcessPoolExecutor(2, mp_context=context)
        if state == "busy+idle":  # one worker busy, one idle
            executor.submit(task, "busy", directory)
            while not [n for n in os.listdir(directory) if n.startswith("in-")]:
                time.sleep(0.02)
            mark(directory, "in-%d" % executor.submit(task, "idle", directory).result())
        else:
            for _ in range(2):
                executor.submit(task, state, directory)
    elif kind == "dataloader":
        import torch.utils.data
        loader = torch.utils.data.DataLoader(Items(state, directory), batch_size=None,
                                             num_workers=2, multiprocessing_context=method)
        batches = iter(loader)
        next(batches)
        for worker in batches._workers:  # idle: waiting for indices, their queue full
            mark(directory, "in-%d" % worker.pid)
    elif kind == "process":
        context.Process(target=wait, args=(state, directory)).start()
    elif kind == "mpspawn":
        import torch.multiprocessing
        torch.multiprocessing.start_processes(rank, args=(state, directory), nprocs=2,
                                              start_method=method)
    elif kind == "thread":  # a child started by a thread that ends at once
        thread = threading.Thread(target=lambda: context.Process(
            target=wait, args=(state, directory)).start())
        thread.start()
        thread.join()
        mark(directory, "thread-ended")
    elif kind == "closed":  # a parent that closes every descriptor (as daemonizing does)
        context.Process(target=wait, args=(state, directory)).start()
        while not [n for n in os.listdir(directory) if n.startswith("in-")]:
            time.sleep(0.02)
        os.closerange(3, 65536)  # the write end of its child's parent sentinel too
        mark(directory, "closed")
    elif kind == "detached":  # a Process the user keeps past its parent's death
        os.environ["MPCOMPAT_OUTLIVE_PARENT"] = "1"
        context.Process(target=wait, args=(state, directory)).start()
        del os.environ["MPCOMPAT_OUTLIVE_PARENT"]
    time.sleep(600)


# --- the test side -----------------------------------------------------------------------------

def scenario_env(enabled):
    """The parent's environment: mpcompat active as installed (``mpcompat/_startup`` first on
    PYTHONPATH), or not at all (``MPCOMPAT_DISABLE=1``)."""
    env = dict(os.environ)
    for name in ("MPCOMPAT_DISABLE", "MPCOMPAT_DISABLED_PATCHES", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "mpcompat", "_startup"), REPO,
                                         TESTS])
    env["OMP_NUM_THREADS"] = "1"
    if not enabled:
        env["MPCOMPAT_DISABLE"] = "1"
    return env


def _stat(pid):
    """``(state, start time)`` of ``pid`` from /proc, or None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[19])
    except (OSError, IndexError):
        return None


def descendants(root):
    """``{pid: start time}`` of every live descendant of ``root`` (from /proc)."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name, "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] not in (b"Z", b"X"):
                children.setdefault(int(fields[1]), []).append((int(name), int(fields[19])))
    found, todo = {}, [root]
    while todo:
        for pid, start in children.get(todo.pop(), ()):
            found[pid] = start
            todo.append(pid)
    return found


def alive(snapshot):
    """The pids of ``snapshot`` (:func:`descendants`) that still live, zombies not counted."""
    return sorted(pid for pid, start in snapshot.items()
                  if (_stat(pid) or ("Z", None))[0] not in ("Z", "X")
                  and _stat(pid)[1] == start)


def _wait_for(directory, prefix, count, proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len([n for n in os.listdir(directory) if n.startswith(prefix)]) >= count:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def _start(row, directory, enabled, procs):
    """Start ``row``'s parent; returns its Popen (its output in ``directory``)."""
    out = open(os.path.join(directory, "stdout"), "wb")
    err = open(os.path.join(directory, "stderr"), "wb")
    if row.kind == "torchrun":
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc_per_node=2", "--local_addr=127.0.0.1"
                   if not __import__("torch").__version__.startswith("1.") else "",
                   os.path.join(TESTS, "orphans", "rank.py"), row.state, directory]
        command = [arg for arg in command if arg]
    else:
        command = [sys.executable, "-c", "import orphans_helpers; orphans_helpers.parent_main()",
                   row.kind, row.method, row.state, directory, procs or "-"]
    with out, err:
        return subprocess.Popen(command, env=scenario_env(enabled), cwd=directory, stdout=out,
                                stderr=err, start_new_session=True)


def run_row(row, directory, enabled, procs=None):
    """Run one scenario in ``directory`` (empty); ``procs``: the ``cgroup.procs`` of a memory
    cgroup for the OOM killer. Returns a dict: ``started`` (pids of the parent's descendants as
    it was killed), ``survivors`` (those alive ``GRACE`` s after its death; for the detached
    row, ``KEPT`` s after), ``kept`` (the thread row: those alive ``KEPT`` s after the thread
    that started them ended, before the parent is killed), ``notes`` (the death notes on
    stderr), ``pid`` (the parent's), ``parent`` (its exit status), ``error`` (what went
    wrong)."""
    os.mkfifo(os.path.join(directory, "fifo"))
    # Held, never read: a write to it blocks once the pipe is full.
    fifo = os.open(os.path.join(directory, "fifo"), os.O_RDWR | os.O_NONBLOCK)
    proc = _start(row, directory, enabled, procs)
    result = {"pid": proc.pid, "started": [], "survivors": [], "notes": [], "error": None}
    snapshot = {}
    try:
        marker = SETTLED.get(row.kind, "in-")
        count = 1 if row.kind in SETTLED else row.workers
        if not _wait_for(directory, marker, count, proc, 240):
            result["error"] = "the workers did not reach their state (parent exit code %s)" % (
                proc.poll(),)
            return result
        time.sleep(0.3)  # a busy worker in its loop, a pipe's writer blocked
        snapshot = descendants(proc.pid)
        result["started"] = sorted(snapshot)
        if row.kind in SETTLED:  # the parent lives on: its child must too
            time.sleep(KEPT)
            result["kept"] = alive(snapshot)
        if row.killer == "OOM":
            open(os.path.join(directory, "oom-go"), "w").close()
        else:
            os.kill(proc.pid, SIGNALS[row.killer])
        proc.wait(60)
        time.sleep(KEPT if row.kind == "detached" else GRACE)
        result["survivors"] = alive(snapshot)
        result["parent"] = proc.returncode
        return result
    except Exception as exc:
        result["error"] = repr(exc)
        return result
    finally:
        for pid in list(snapshot) + [proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        os.close(fifo)
        with open(os.path.join(directory, "stderr"), "rb") as fh:
            result["notes"] = [line for line in fh.read().decode("utf-8", "replace").splitlines()
                               if "exits: its parent" in line]


def run_matrix(rows, base, enabled, procs=None):
    """Run ``rows`` at once, each in a directory of its own under ``base``; returns
    ``{repr(row): run_row's dict}``. ``procs``: ``{repr(row): cgroup.procs}`` of the OOM rows."""
    results, threads = {}, []
    for index, row in enumerate(rows):
        directory = os.path.join(base, "%02d-%s-%s" % (index, row.kind, "on" if enabled
                                                       else "off"))
        os.makedirs(directory)

        def one(row=row, directory=directory):
            results[repr(row)] = run_row(row, directory, enabled, (procs or {}).get(repr(row)))
        threads.append(threading.Thread(target=one))
        threads[-1].start()
    for thread in threads:
        thread.join()
    return results


def run_rows(rows, base, enabled):
    """:func:`run_matrix` with a memory cgroup made (and removed after) for each OOM row; an OOM
    row where none can be made (no cgroup file system, not root) is left out of the result."""
    from exit_evidence_helpers import make_cgroup, remove_cgroup
    procs, made = {}, []
    try:
        for index, row in enumerate(rows):
            if row.killer == "OOM":
                directory = make_cgroup("mpc-orphans-%d-%s-%d" % (os.getpid(), enabled, index))
                if directory is not None:
                    made.append(directory)
                    procs[repr(row)] = os.path.join(directory, "cgroup.procs")
        return run_matrix([row for row in rows if row.killer != "OOM" or repr(row) in procs],
                          base, enabled, procs)
    finally:
        for directory in made:
            remove_cgroup(directory)


# --- what each row must show with mpcompat -----------------------------------------------------

NOTE = re.compile(r"^mpcompat: (.+) \(pid (\d+)\) exits: its parent \(pid (\d+)\) died"
                  r"(: killed by signal (\d+) \((\w+)\)|: exit code \d+| \(its exit status is "
                  r"not known here: it was already reaped\))\.$")


def check(rows, results):
    """Every row ran; its children were alive as the parent died; none is left 2 s after
    (the thread and closed rows' lived 10 s while their parent lived; the detached row's live
    10 s after its death); each child that ended says why, on one line, naming the parent's
    pid and, where known, the signal that killed it. Returns the failures."""
    failures = []
    for row in rows:
        result = results[repr(row)]
        name = repr(row)
        if result["error"]:
            failures.append("%s: %s" % (name, result["error"]))
            continue
        if len(result["started"]) < row.workers:
            failures.append("%s: %d children as the parent died" % (name,
                                                                   len(result["started"])))
        if row.kind in SETTLED and result.get("kept") != result["started"]:
            failures.append("%s: killed while its parent lives: %s of %s left" % (
                name, result.get("kept"), result["started"]))
        if row.kind == "closed":  # it can no longer tell its parent's death (patches.md)
            if result["notes"]:
                failures.append("%s: notes %s" % (name, result["notes"]))
            continue
        if row.kind == "detached":
            if result["survivors"] != result["started"]:
                failures.append("%s: a kept child was killed: %s of %s left" % (
                    name, result["survivors"], result["started"]))
            if result["notes"]:
                failures.append("%s: notes %s" % (name, result["notes"]))
            continue
        if result["survivors"]:
            failures.append("%s: %s still alive 2 s after the parent died" % (
                name, result["survivors"]))
        if row.kind == "mpspawn" and row.method != "forkserver":
            continue  # torch's own PR_SET_PDEATHSIG (SIGINT) may end them first, silently
        if len(result["notes"]) < row.workers:
            failures.append("%s: death notes %s" % (name, result["notes"]))
        for note in result["notes"]:
            match = NOTE.match(note)
            if match is None or int(match.group(3)) != result["pid"]:
                failures.append("%s: note %r (parent pid %s)" % (name, note, result["pid"]))
            elif match.group(6) and match.group(6) != ("SIGKILL" if row.killer == "OOM"
                                                       else row.killer):
                failures.append("%s: note %r: not %s" % (name, note, row.killer))
    return failures
