"""A background thread that runs the host work of kernel-map builds.

Why a thread: a workload-A forward from PyTorch spends about half of its
host time issuing map builds (library calls that launch ~12-44 small
kernels each, the wait for a strided map's output count, the Python
around them; docs/perf-notes.md item 94), and in eager PyTorch the host
issue time is the forward's time once it exceeds the GPU's. The builds
depend on coordinates only, so once the map plan (kmap._MapPlan) says which
maps a level will ask for, another thread can issue them while the caller's
thread issues the convolutions. The library is a ctypes CDLL: its calls run
without the GIL, so the two threads' library work overlaps; only their
Python interleaves.

One worker per process, started on first use, a daemon (it never keeps the
interpreter alive). Jobs run in submission order; a job's exception is the
job's business (the map jobs record failure in their pending entry and the
request builds the map again), and never stops the thread. After a fork the
child starts its own thread with an empty queue (the parent's thread does
not exist there)."""

import collections
import os
import threading


class Pending:
    """A result a worker job fills: ``value`` once ``done`` is set
    (``failed`` when the job raised)."""

    __slots__ = ("done", "value", "failed")

    def __init__(self):
        self.done = threading.Event()
        self.value = None
        self.failed = False

    def wait(self):
        """The value, after the job finished (None if it failed)."""
        if not self.done.is_set():
            self.done.wait()
        return None if self.failed else self.value


class Worker:
    """A FIFO job thread (see the module doc)."""

    def __init__(self, name):
        self.name = name
        self._cv = threading.Condition()
        self._jobs = collections.deque()
        self._busy = False
        self._thread = None
        self._pid = None
        # What a job raised that it did not handle itself: a bug (the map
        # jobs handle their errors); tests assert it stays None.
        self.last_error = None

    def submit(self, fn, *args):
        """Queues fn(*args); returns at once."""
        with self._cv:
            if self._thread is None or self._pid != os.getpid():
                self._jobs.clear()  # a forked child: the parent's queue is not ours
                self._busy = False
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._jobs.append((fn, args))
            self._cv.notify()

    def on_worker(self):
        """True when called from the worker thread itself."""
        return threading.current_thread() is self._thread

    def drain(self):
        """Waits until every job submitted so far has run (returns at once
        on the worker thread itself, where waiting would never end)."""
        if self.on_worker():
            return
        with self._cv:
            if self._pid != os.getpid():
                return
            while self._jobs or self._busy:
                self._cv.wait()

    def idle(self):
        with self._cv:
            return not self._jobs and not self._busy

    def _run(self):
        while True:
            with self._cv:
                while not self._jobs:
                    self._cv.wait()
                fn, args = self._jobs.popleft()
                self._busy = True
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - see the module doc
                self.last_error = e
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()
