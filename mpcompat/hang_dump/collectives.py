"""Hang dumps of collectives: with ``MPCOMPAT_HANG_DUMP=SECONDS``, a rank that has waited
SECONDS in a collective asks every rank of the job, through the c10d store they share, where it
is; the report names the ranks that are not in that collective, with their stacks.

- Each watched collective (``torch.collective_hang_dump``) counts itself (its sequence number, the
  same on every rank that calls the same collectives) and sets one slot while it runs: no clock
  read, no store traffic. Start-up (imports, rendezvous, ``init_process_group``) is never
  watched: only collectives are.
- A timer thread, started by the first collective, reads the slot every SECONDS/4 (at most
  1 s) and dates a collective when it first sees it.
- A watcher thread per rank, started as the process group is made, holds its own client of the
  job's TCPStore (``MASTER_ADDR:MASTER_PORT``, across nodes) and blocks in one ``wait`` for a
  request: no traffic while nothing is stuck. A stuck rank claims the collective (the first one
  only: ``add`` on a key of its sequence number), posts the request, and every rank's watcher
  answers with its rank, host, collective and the main thread's stack; the claimant prints the
  report. Any backend (gloo, NCCL): only the store is used.
"""
import json
import os
import socket
import sys
import threading
import time
import traceback
from _thread import allocate_lock, get_ident, start_new_thread
from datetime import timedelta

from mpcompat.hang_dump import watchdog
from mpcompat.workers.user_frames import is_own

_ANSWER_WAIT = 10.0  # seconds the claimant waits for the other ranks' answers
_monotonic = time.monotonic


class _CollectivesState(object):
    """This rank's state for the hang dumps of collectives."""

    __slots__ = ("current", "seq", "main", "seconds", "timer", "watcher", "store_factory",
                 "wakes")

    def __init__(self):
        self.current = None   # the collective the main thread is in: [name, seq, first seen]
        self.seq = 0          # outermost collectives entered so far
        self.main = threading.main_thread().ident
        self.seconds = None   # SECONDS; None: off
        self.timer = False    # the timer thread runs
        self.watcher = None   # the watcher thread's "stopped" lock (held while it runs)
        self.store_factory = None  # makes this rank's own client of the job's store
        self.wakes = 0        # the wake-ups of this rank's watchers so far


_state = _CollectivesState()
# The store clients made so far, never destroyed: torch 1.9's TCPStore aborts the process
# ("terminate called without an active exception") when one is destroyed after its server left.
_kept_clients = []


def switch_on():
    """Switch the collectives' hang dumps on with SECONDS; raise ``NotNeeded`` when
    ``MPCOMPAT_HANG_DUMP`` is unset or not a positive number (silently: the
    ``multiprocessing.hang_dump`` patch warns)."""
    _state.seconds = watchdog.seconds_from_env(quiet=True)


def like_original(wrapper, original):
    """``wrapper``, named and documented as ``original``, which it wraps."""
    wrapper.__wrapped__ = original
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(wrapper, attr, getattr(original, attr, None))
    return wrapper


def watched_collective(original, name):
    """``original`` (a collective of torch.distributed), counted and watched while it runs in
    the main thread; a collective called inside another one is part of it."""
    def collective(*args, **kwargs):
        if _state.current is not None or get_ident() != _state.main:
            return original(*args, **kwargs)
        _state.seq += 1
        _state.current = [name, _state.seq, None]
        if not _state.timer:
            _start_timer()
        try:
            return original(*args, **kwargs)
        finally:
            _state.current = None
    return like_original(collective, original)


def start_watcher(store_factory):
    """Start this rank's watcher thread (once), which answers requests with a store client
    made by ``store_factory(timeout)``."""
    if _state.watcher is not None or _state.seconds is None:
        return
    _state.store_factory = store_factory
    _state.watcher = allocate_lock()
    _state.watcher.acquire()
    start_new_thread(_answer_requests, (_state.watcher,))


def stop_watcher():
    """Wake this rank's watcher out of its wait and let it end (at most 1 s), before the
    process group (torch 1.9: the store's server, in rank 0) goes: torch 1.9 aborts a process
    whose store server is destroyed while a client of it waits there. Never raises."""
    stopped, _state.watcher = _state.watcher, None
    if stopped is None or stopped.acquire(False):  # none, or it ended (its store went away)
        return
    try:
        _wake(_client(5.0), int(os.environ.get("RANK", "-1")), "stop")
        if stopped.acquire(True, 1.0):
            stopped.release()
    except Exception:
        pass


def _start_timer():
    _state.timer = True
    start_new_thread(_time_collectives, ())


def _ids():
    env = os.environ
    return env.get("RANK", "?"), env.get("LOCAL_RANK", "?"), socket.gethostname()


def _prefix():
    env = os.environ
    return "mpcompat/collective_hang_dump/%s/%s/" % (env.get("TORCHELASTIC_RUN_ID", ""),
                                                     env.get("TORCHELASTIC_RESTART_COUNT", "0"))


def _time_collectives():
    """The timer thread: claims a collective that lasts SECONDS, once per collective."""
    poll = min(1.0, _state.seconds / 4.0)
    store, reported = None, None
    while True:
        time.sleep(poll)
        current = _state.current
        if current is None or current is reported:
            continue
        if current[2] is None:
            current[2] = _monotonic()
        elif _monotonic() - current[2] >= _state.seconds:
            reported = current
            try:
                store = store or _client()
                _claim(store, current)
            except Exception as exc:
                _write_stderr(["mpcompat: rank %s: a stuck %s #%d could not be reported "
                               "through the c10d store (%s: %s)" % (
                                   _ids()[0], current[0], current[1], type(exc).__name__, exc)])


def _claim(store, current):
    """Report the stuck collective ``current`` of this rank, unless a rank in the same one
    claimed it first (then say only that)."""
    name, seq, since = current
    rank, local_rank, host = _ids()
    waited = _monotonic() - since
    header = "mpcompat: rank %s (local rank %s on %s, pid %d) has waited %.0f s in %s #%d" % (
        rank, local_rank, host, os.getpid(), waited, name, seq)
    prefix = _prefix()
    if store.add(prefix + "claim/%d" % seq, 1) != 1:
        _write_stderr([header + ": another rank in it reports for every rank"])
        return
    number = store.add(prefix + "requests", 1)
    world_size = int(os.environ["WORLD_SIZE"])
    for other in range(world_size):
        _wake(store, other, str(number))
    answers = _collect_answers(store, prefix + "answer/%d/" % number, world_size)
    _write_stderr([header + "; where every rank is (from the c10d store):"] +
           report_lines(name, seq, answers) + ["mpcompat: end of the hang dump of rank %s" % rank])


def _collect_answers(store, prefix, world_size):
    """``{rank: answer or None}`` for every rank of the job, waiting at most _ANSWER_WAIT s."""
    deadline = _monotonic() + _ANSWER_WAIT
    found = {}
    for rank in range(world_size):
        try:
            left = max(0.1, deadline - _monotonic())
            store.wait([prefix + str(rank)], timedelta(seconds=left))
            found[rank] = json.loads(store.get(prefix + str(rank)).decode())
        except Exception:
            found[rank] = None
    return found


def report_lines(name, seq, answers):
    """The report: one line per rank (those not in ``name #seq`` first), then their stacks."""
    lines, stacks = [], []
    for rank in sorted(answers, key=lambda r: (_is_in(answers[r], seq), r)):
        answer = answers[rank]
        if answer is None:
            lines.append("  rank %d did not answer within %.0f s: it is dead, or it has not "
                         "made its process group yet" % (rank, _ANSWER_WAIT))
            continue
        where = _where_outside_torch(answer["stack"])
        who = "rank %d (local rank %s on %s, pid %d)" % (rank, answer["local_rank"],
                                                          answer["host"], answer["pid"])
        if _is_in(answer, seq):
            lines.append("  %s is in %s #%d too" % (who, name, seq))
            continue
        current = answer["collective"]
        doing = ("it is in %s #%d, at %s" % (current[0], current[1], where) if current
                 else "it is at %s" % where)
        lines.append("  %s is not in %s #%d: %s" % (who, name, seq, doing))
        stacks.append("  Stack of rank %d (main thread), innermost last:" % rank)
        for filename, line, function, code, _ in answer["stack"]:
            stacks.append('    File "%s", line %d, in %s' % (filename, line, function))
            if code:
                stacks.append("      " + code)
    return lines + stacks


def _is_in(answer, seq):
    return answer is not None and bool(answer["collective"]) and answer["collective"][1] == seq


def _where_outside_torch(stack):
    """``"train.py:16 in run"``: the innermost frame of ``stack`` outside torch."""
    frames = [f for f in stack if not f[4]] or stack
    if not frames:
        return "an unknown place (no Python frame)"
    return "%s:%d in %s" % (os.path.basename(frames[-1][0]), frames[-1][1], frames[-1][2])


def _wake(store, rank, what):
    """Wake the watcher of ``rank`` with ``what``: a request's number, or "stop"."""
    key = _prefix() + "wake/%d/" % rank
    store.set(key + str(store.add(key + "count", 1)), what)


def _answer_requests(stopped):
    """The watcher thread: answers each request posted for this rank, till told to stop;
    releases ``stopped`` as it ends."""
    try:
        store = _client()
        rank = int(os.environ.get("RANK", "-1"))
        key = _prefix() + "wake/%d/" % rank
        while True:
            _state.wakes += 1
            store.wait([key + str(_state.wakes)], timedelta(days=365))
            what = store.get(key + str(_state.wakes)).decode()
            if what == "stop":
                return
            store.set(_prefix() + "answer/%s/%d" % (what, rank), json.dumps(_own_answer()))
    except Exception:  # the store is gone: the job is ending
        return
    finally:
        stopped.release()


def _own_answer():
    """This rank's answer: where it is, and the main thread's stack (mpcompat's frames left
    out) as [file, line, function, code, whether torch's] lists."""
    rank, local_rank, host = _ids()
    current = _state.current
    frame = sys._current_frames().get(_state.main)
    torch_dir = os.path.dirname(getattr(sys.modules.get("torch"), "__file__", "") or "/-")
    stack = [[f.filename, f.lineno, f.name, f.line, f.filename.startswith(torch_dir + os.sep)]
             for f in traceback.extract_stack(frame) if not is_own(f.filename)] if frame else []
    return {"local_rank": local_rank, "host": host, "pid": os.getpid(), "stack": stack,
            "collective": current[:2] if current else None}


def _client(timeout=60.0):
    """A new client of the job's store (``timeout``: seconds to connect, and for each call),
    kept for ever (see _kept_clients)."""
    _kept_clients.append(_state.store_factory(timeout))
    return _kept_clients[-1]


def _write_stderr(lines):
    try:
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
    except Exception:
        pass
