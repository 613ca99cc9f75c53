"""A worker killed by the kernel's OOM killer is named so, with the evidence, the limit it hit and
its peak memory; a worker SIGKILLed by another process is named "not the OOM killer". Real
kills: a worker moves itself into a memory cgroup with a 200 MB limit (made by the test, removed
after it) and allocates until the kernel kills it. Each scenario runs in a child bounded by a
timeout; Pool (fork, forkserver) and ProcessPoolExecutor (spawn)."""
import multiprocessing
import os
import re
import sys

import pytest

from exit_evidence_helpers import kernel_log_readable, make_cgroup, remove_cgroup
from pool_workers_helpers import flat, run_script

SCENARIO = '''\
import concurrent.futures as cf, multiprocessing, os, sys, threading
import mpcompat
from exit_evidence_helpers import exhaust_memory, join_cgroup, kill_myself
from pool_workers_helpers import full_outcome, report

HIDE_KMSG = 'mount --bind /dev/null /dev/kmsg && exec "$0" "$@"'
# The fork rule: the threads of Pools and executors that reap workers import nothing.
HELPERS = ("_handle_workers", "_handle_tasks", "_handle_results")
imports = []


def audit(event, args):
    thread = threading.current_thread()
    name = getattr(getattr(thread, "_target", None), "__name__", "")
    if event == "import" and (name in HELPERS or type(thread).__name__ == "_ExecutorManagerThread"):
        imports.append(args[0])


def run(kind, context, func, arg):
    """What the user's call raises when ``func(arg)`` kills its worker."""
    if kind == "pool":
        with context.Pool(1) as pool:
            return full_outcome(lambda: pool.apply(func, (arg,)))
    with cf.ProcessPoolExecutor(1, mp_context=context) as executor:
        return full_outcome(lambda: executor.submit(func, arg).result(60))


if __name__ == "__main__":
    kind, method, procs, where, kmsg = sys.argv[1:6]
    if kmsg == "hidden" and os.path.exists("/dev/kmsg") and not os.environ.get("HIDDEN"):
        # A mount namespace of its own where /dev/kmsg reads nothing: the counters must tell.
        os.environ["HIDDEN"] = "1"
        os.execvp("unshare", ["unshare", "-m", "sh", "-c", HIDE_KMSG, sys.executable]
                  + sys.argv)
    if kmsg == "pidns" and not os.environ.get("HIDDEN"):
        # A pid namespace of its own: the kernel log names pids this process does not see.
        os.environ["HIDDEN"] = "1"
        os.execvp("unshare", ["unshare", "-p", "-f", "-m", "--mount-proc", sys.executable]
                  + sys.argv)
    if where == "parent":
        join_cgroup(procs)  # the workers start in the limited cgroup
    context = multiprocessing.get_context(method)
    sys.addaudithook(audit)
    data = {"kill": run(kind, context, kill_myself, None)}
    if procs != "-":
        data["oom"] = run(kind, context, exhaust_memory, procs if where == "worker" else None)
    report(dict(data, imports=imports))
'''
NOT_OOM = ("): another process sent SIGKILL (a job scheduler's time or memory limit, `kill -9`).")
PEAK = re.compile(r"Its peak resident memory: ([0-9.]+) MiB \(ru_maxrss, as this process reaped "
                  r"it\)\.")
NO_PEAK = ("Its peak resident memory is not known: the forkserver reaped it, and tells only its "
           "exit status.")


@pytest.fixture
def cgroup(request):
    directory = make_cgroup("mpcompat-test-%d-%s" % (os.getpid(), request.node.name[-20:]
                                                   .replace("[", "-").replace("]", "")))
    if directory is None:
        pytest.skip("no memory cgroup can be made here (no cgroup file system, or not root)")
    yield directory
    remove_cgroup(directory)


def scenario(tmp_path, cgroup, kind, method, where, kmsg):
    if kind == "executor" and sys.version_info < (3, 9):
        pytest.skip("Python 3.8's ProcessPoolExecutor has no hook (patch not needed)")
    if method not in ("fork", "spawn") and sys.platform != "linux":
        pytest.skip("forkserver: Linux")
    data, proc = run_script(tmp_path, SCENARIO, kind, method, os.path.join(cgroup, "cgroup.procs"),
                            where, kmsg, timeout=180)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data["imports"] == [], data["imports"]
    return flat(data["oom"]["text"]), flat(data["kill"]["text"])


@pytest.mark.parametrize("kind", ["pool", "executor"])
def test_a_sigkill_from_another_process_is_not_the_oom_killer(tmp_path, kind):
    """No cgroup needed: the default start method (3.14+: forkserver)."""
    if kind == "executor" and sys.version_info < (3, 9):
        pytest.skip("Python 3.8's ProcessPoolExecutor has no hook (patch not needed)")
    method = multiprocessing.get_start_method()
    data, proc = run_script(tmp_path, SCENARIO, kind, method, "-", "-", "visible", timeout=180)
    assert data is not None and proc.returncode == 0, proc.stderr[-3000:]
    assert data["imports"] == [], data["imports"]
    kill = flat(data["kill"]["text"])
    assert "killed by signal 9 (SIGKILL)" in kill, kill
    if kernel_log_readable():
        evidence = r"the kernel log, /dev/kmsg, names no OOM kill of pid \d+ since it started"
    elif os.path.exists("/proc/vmstat"):
        evidence = r"its counter did not change: /proc/vmstat's oom_kill, .* while it ran"
    else:
        pytest.skip("no evidence here: not Linux")
    assert re.search(r"Not the OOM killer \(" + evidence + re.escape(NOT_OOM), kill), kill
    peak = peak_line(kill, method)
    assert peak is None or peak < 150, kill


def peak_line(text, method):
    """The peak memory the report names (MiB), or None where the forkserver reaped it."""
    if method == "forkserver":
        assert NO_PEAK in text, text
        return None
    found = PEAK.search(text)
    assert found, text
    return float(found.group(1))


CASES = [("pool", "fork"), ("pool", "forkserver"), ("executor", "spawn")]


@pytest.mark.parametrize("kind, method", CASES)
def test_an_oom_kill_is_named_with_the_kernel_logs_line(tmp_path, cgroup, kind, method):
    if not kernel_log_readable():
        pytest.skip("the kernel log (/dev/kmsg) is not readable here")
    oom, kill = scenario(tmp_path, cgroup, kind, method, "worker", "visible")
    assert "killed by the kernel's OOM killer: signal 9, SIGKILL" in oom, oom
    assert ("Out of memory: the kernel's OOM killer killed it. Evidence: the kernel log, "
            "/dev/kmsg, names it: \"") in oom and "Killed process " in oom, oom
    assert re.search(r"The limit it hit: the limit of memory cgroup \S*%s, 200\.0 MiB \(the "
                     r"kernel log: \"memory: usage \d+kB, limit 204800kB" % os.path.basename(
                         cgroup), oom), oom
    peak = peak_line(oom, method)
    assert peak is None or peak > 190, oom
    # The same worker SIGKILLed by itself: not the OOM killer, and the log says so.
    assert "killed by signal 9 (SIGKILL)" in kill, kill
    assert re.search(r"Not the OOM killer \(the kernel log, /dev/kmsg, names no OOM kill of pid "
                     r"\d+ since it started" + re.escape(NOT_OOM), kill), kill
    assert peak_line(kill, method) is None or peak_line(kill, method) < 150, kill


@pytest.mark.parametrize("kind, method", CASES)
def test_without_the_kernel_log_the_counters_tell(tmp_path, cgroup, kind, method):
    if os.geteuid() != 0 or not os.path.exists("/dev/kmsg"):
        pytest.skip("hiding /dev/kmsg needs root (a mount namespace)")
    oom, kill = scenario(tmp_path, cgroup, kind, method, "parent", "hidden")
    assert "killed by the kernel's OOM killer: signal 9, SIGKILL" in oom, oom
    assert re.search(r"Out of memory: the kernel's OOM killer killed it\. Evidence: the oom_kill "
                     r"counter of its memory cgroup %s \(memory\.(oom_control|events)\) went from "
                     r"0 to 1 while it ran \(a count, not a pid" % re.escape(cgroup), oom), oom
    assert re.search(r"The limit it hit: the limit of memory cgroup %s, 200\.0 MiB \(memory\."
                     r"(limit_in_bytes|max)\)\." % re.escape(cgroup), oom), oom
    assert peak_line(oom, method) is None or peak_line(oom, method) > 190, oom
    assert "killed by signal 9 (SIGKILL)" in kill, kill
    assert re.search(r"Not the OOM killer \(its counter did not change: /proc/vmstat's oom_kill, "
                     r"which counts every OOM kill on this machine, stayed at \d+ while it ran"
                     + re.escape(NOT_OOM), kill), kill


def test_in_a_pid_namespace_the_counters_tell(tmp_path, cgroup):
    """A container's pids are not the kernel's, which its log names: the log is not used (it
    would name no kill of the worker's pid, a false "not the OOM killer")."""
    if os.geteuid() != 0 or not kernel_log_readable():
        pytest.skip("a pid namespace needs root; the kernel log must be readable")
    oom, kill = scenario(tmp_path, cgroup, "pool", "fork", "parent", "pidns")
    assert "killed by the kernel's OOM killer: signal 9, SIGKILL" in oom, oom
    assert "Evidence: the oom_kill counter of its memory cgroup " in oom, oom
    assert "Not the OOM killer (its counter did not change: /proc/vmstat's oom_kill" in kill, kill


def test_a_kill_in_another_cgroup_without_the_kernel_log_is_a_maybe(tmp_path, cgroup):
    """The worker left the cgroup it started in: only the machine's counter moved."""
    if os.geteuid() != 0 or not os.path.exists("/dev/kmsg"):
        pytest.skip("hiding /dev/kmsg needs root (a mount namespace)")
    oom, _ = scenario(tmp_path, cgroup, "pool", "fork", "worker", "hidden")
    assert "(killed by signal 9 (SIGKILL))" in oom, oom
    assert re.search(r"Maybe out of memory: the kernel's OOM killer may have killed it\. "
                     r"Evidence: /proc/vmstat's oom_kill went from (\d+) to (\d+) while it ran: "
                     r"the OOM killer killed some process on this machine \(a count, not a pid\)",
                     oom), oom
    assert peak_line(oom, "fork") > 190, oom
