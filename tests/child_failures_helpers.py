"""Process targets for tests/child_failures (importable in spawn and forkserver children)."""
import os
import sys


def fail_and_record(what, message="the data is gone"):
    """Fail the way a child failing at start-up does: record the error, exit with code 3."""
    from mpcompat.child_failures import channel
    from mpcompat.diagnose.notes import add_note
    try:
        raise ValueError(message)
    except ValueError as exc:
        add_note(exc, "mpcompat: the fix is to bring the data back")
        add_note(exc, "not an mpcompat note")
        channel.record(exc, what=what)
        channel.record(exc, what="a second call records nothing")
    sys.exit(3)


class Unprintable(Exception):
    """An exception whose str() raises."""

    def __str__(self):
        raise RuntimeError("no")


def record_unprintable():
    """record() of an exception that cannot be printed: never raises."""
    from mpcompat.child_failures import channel
    channel.record(Unprintable())
    sys.exit(4)


def pid():
    """This process's pid."""
    return os.getpid()


def fail_once(flag):
    """A Pool initializer that raises in the first worker that runs it only."""
    with flag.get_lock():
        first, flag.value = flag.value == 0, 1
    if first:
        raise ValueError("the service is not up yet")


def double(x):
    """A Pool task."""
    return 2 * x


def send_raw(address, data):
    """Send ``data`` as they are to the failure channel at ``address`` (see
    ``channel.address``), as a child that does not record properly would."""
    import socket
    where = address.split(":", 1)[1]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(where.replace("@", "\0", 1))
    sock.sendall(data)
    sock.close()


def when_set(event, target, *args):
    """``target(*args)`` once ``event`` is set."""
    event.wait(60)
    return target(*args)
