"""Flags between threads: a value published in one thread is seen by another spinning on it."""
import threading
import time

import numpy as np

from pycaffe_ft.kernels.spin import await_other, await_value, publish, publish_then_await_other

_PLENTY = 1 << 28  # spins: seconds, not forever, if the other thread failed


def test_a_spinning_thread_sees_the_value_another_publishes():
    flags = np.zeros(16, np.int64)
    seen = []
    waiter = threading.Thread(target=lambda: seen.append(await_other(flags, 8, 0, _PLENTY)))
    waiter.start()
    time.sleep(0.01)
    publish(flags, 8, 7)
    waiter.join(5)
    assert seen == [7]


def test_spinning_ends_after_the_spins_asked_for():
    flags = np.zeros(1, np.int64)
    assert await_other(flags, 0, 0, 1000) == 0
    assert not await_value(flags, 0, 3, 1000)
    publish(flags, 0, 3)
    assert await_value(flags, 0, 3, 0)


def test_publish_then_await_answers_a_ping_with_a_pong():
    flags = np.zeros(16, np.int64)
    answers = []

    def ponger():
        value = await_other(flags, 0, 0, _PLENTY)
        answers.append(publish_then_await_other(flags, 8, value + 1, 0, value, _PLENTY, 10))
    thread = threading.Thread(target=ponger)
    thread.start()
    publish(flags, 0, 1)
    assert await_value(flags, 8, 2, _PLENTY)  # the pong to the first ping
    publish(flags, 0, 5)
    thread.join(5)
    assert answers == [5]  # the ponger saw the second ping
