"""The map thread's job queue (voxconv/_worker.py), without a GPU: jobs run
in submission order on one thread that is not the caller's, drain() waits
for every job queued so far, a job that raises leaves the thread running
(and is recorded), Pending hands a value or a failure across, and a forked
child gets its own thread."""

import os
import threading
import time

import pytest

from voxconv import _worker


def test_jobs_run_in_order_on_the_worker_thread():
    w = _worker.Worker("test-order")
    seen, threads = [], set()

    def job(i):
        time.sleep(0.001 * (i % 3))  # uneven jobs: order must still hold
        seen.append(i)
        threads.add(threading.get_ident())
        assert w.on_worker()

    for i in range(50):
        w.submit(job, i)
    assert not w.on_worker()
    w.drain()
    assert seen == list(range(50))
    assert threads and threading.get_ident() not in threads and len(threads) == 1
    assert w.idle() and w.last_error is None


def test_drain_waits_for_the_running_job():
    w = _worker.Worker("test-drain")
    gate, done = threading.Event(), []
    w.submit(gate.wait)
    w.submit(done.append, 1)
    assert not w.idle()
    threading.Timer(0.2, gate.set).start()
    t0 = time.perf_counter()
    w.drain()
    assert time.perf_counter() - t0 >= 0.15 and done == [1]


def test_a_raising_job_does_not_stop_the_thread():
    w = _worker.Worker("test-raise")
    out = []

    def bad():
        raise RuntimeError("planted")

    w.submit(bad)
    w.submit(out.append, "after")
    w.drain()
    assert out == ["after"]
    assert isinstance(w.last_error, RuntimeError) and "planted" in str(w.last_error)


def test_drain_on_the_worker_returns():
    """A job that drains its own worker would wait for itself forever."""
    w = _worker.Worker("test-self")
    out = []

    def job():
        w.drain()
        out.append("drained")

    w.submit(job)
    w.drain()
    assert out == ["drained"]


def test_pending_value_and_failure():
    w = _worker.Worker("test-pending")
    ok, bad = _worker.Pending(), _worker.Pending()

    def fill():
        time.sleep(0.05)
        ok.value = 42
        ok.done.set()
        bad.failed = True
        bad.done.set()

    w.submit(fill)
    assert ok.wait() == 42  # blocks until the job set it
    assert bad.wait() is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_gets_its_own_thread():
    w = _worker.Worker("test-fork")
    w.submit(lambda: None)
    w.drain()
    r, wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the parent's thread does not exist here
        try:
            out = []
            w.submit(out.append, 7)
            w.drain()
            os.write(wr, b"ok" if out == [7] else b"no")
        finally:
            os._exit(0)
    os.close(wr)
    got = os.read(r, 2)
    os.waitpid(pid, 0)
    assert got == b"ok"
