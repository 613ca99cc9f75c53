"""Events that let a test hold ``patchkit.gated_target``'s import half-way."""
import threading

started = threading.Event()
release = threading.Event()
