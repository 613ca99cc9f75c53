"""Issue 33: a spawn or forkserver child that fails while starting is told by its parent who
names its error (``mp_children.NAMED`` in its preparation data): a worker whose owner's
error names it prints nothing, and so does a plain Process (its parent names it at join, as it
sees it ended, at the latest as it exits); a worker whose owner's patch is off prints one line
that says all, and sends no record (nobody would name it)."""
import json

from one_report_helpers import run_user_script
from testenv import run_python

NO_GUARD = '''\
import multiprocessing as mp, sys
def square(x): return x * x
pool = mp.get_context(sys.argv[1]).Pool(2)
try:
    pool.map_async(square, range(4)).get(3)
except Exception as exc:
    print("GOT", type(exc).__name__, flush=True)
pool.terminate()
'''


def test_a_worker_whose_owner_names_nothing_says_it_on_its_own_line(tmp_path):
    """The Pool runs as the standard library's (its patch off): it never reads the records, so
    its workers do not say "its parent process reports it once"; each says the cause itself,
    on one line (the standard library's Pool starts another, and another)."""
    code, lines = run_user_script(tmp_path, NO_GUARD, "spawn", timeout=120,
                                  MPCOMPAT_DISABLED_PATCHES="multiprocessing.pool_workers")
    text = "\n".join(lines)
    assert "GOT TimeoutError" in lines, text
    assert "reports it once" not in text and "Traceback" not in text, text
    said = [line for line in lines if line.startswith("mpcompat: this process (pid ")]
    assert said and all(line.endswith(
        "script.py, line 3 starts a new process while this process is still importing the main "
        "module to start up: put it under `if __name__ == \"__main__\":`)") for line in said), \
        text


DECIDED = '''
import json, types
import multiprocessing.pool
import mpcompat
from mpcompat.child_failures import channel

def plain():
    pass

class TorchLike(object):
    __module__ = "torch.somewhere"

    def __call__(self):
        pass

multiprocessing.pool.ThreadPool(1).terminate()  # the Pool patch applies as a Pool is made
worker = multiprocessing.pool.worker
with_channel = types.SimpleNamespace(conn=None, get=None, put=None)
print(json.dumps([
    channel.namer(plain, (), False),
    channel.namer(worker, (with_channel,), True),
    channel.namer(worker, (object(),), True),  # a Pool run as the standard library's
    channel.namer(TorchLike(), (), True),      # an owner that names nothing
]))
mpcompat.deactivate()
mpcompat.activate(disabled_patches=["multiprocessing.pool_workers"])
multiprocessing.pool.ThreadPool(1).terminate()
print(json.dumps(channel.namer(multiprocessing.pool.worker, (with_channel,), True)))
'''


def test_who_names_a_start_up_error_as_the_parent_decides_it():
    result = run_python(DECIDED, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    first, second = [json.loads(line) for line in result.stdout.splitlines()[-2:]]
    assert first == [channel_value("BY_OWNER"), channel_value("BY_OWNER"), None, None], \
        result.stdout
    assert second is None, result.stdout


def channel_value(name):
    from mpcompat.child_failures import channel
    return getattr(channel, name)
