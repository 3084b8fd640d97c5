"""The step Future (lstm_ort/serving/streams/step_future.py): a concurrent.futures.Future whose
callbacks run inside the callback count, whether added before or after the step is done."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from lstm_ort.serving.streams.step_future import StepFuture, in_a_callback, settle


def test_a_callback_added_while_pending_runs_once_at_settle_inside_the_count():
    f, seen = StepFuture(), []
    f.add_done_callback(lambda g: seen.append((g.result(), in_a_callback())))
    assert seen == [] and not f.done()
    settle([(f, [1, 2])])
    assert seen == [([1, 2], True)]
    assert not in_a_callback()


def test_a_callback_added_once_done_runs_at_once_inside_the_count():
    f, seen = StepFuture(), []
    settle([(f, "out")])
    f.add_done_callback(lambda g: seen.append((g.result(), in_a_callback())))
    assert seen == [("out", True)]
    assert not in_a_callback()


def test_errors_reach_their_future_and_the_others_of_the_call_settle():
    ok, bad, cancelled = StepFuture(), StepFuture(), StepFuture()
    assert cancelled.cancel()
    settle([(cancelled, "dropped"), (bad, ValueError("bad feeds")), (ok, "fine")])
    assert ok.result() == "fine"
    with pytest.raises(ValueError, match="bad feeds"):
        bad.result()
    assert cancelled.cancelled()


def test_waiters_of_concurrent_futures_and_asyncio_see_a_settle_from_another_thread():
    futures = [StepFuture() for _ in range(8)]
    timer = threading.Timer(0.05, settle, args=([(f, k) for k, f in enumerate(futures)],))
    timer.start()
    done, pending = concurrent.futures.wait(futures, timeout=10)
    assert not pending and sorted(f.result() for f in done) == list(range(8))
    assert sorted(f.result() for f in concurrent.futures.as_completed(futures, timeout=10)) == list(range(8))

    async def awaited():
        f = StepFuture()
        threading.Timer(0.02, settle, args=([(f, "late")],)).start()
        return await asyncio.wrap_future(f)

    assert asyncio.run(awaited()) == "late"
