"""icrl.backends.in_flight: requests in flight together, at most --max_concurrency at a time, answers
in the order asked; a failed request cancels the others of its call; predict as one call of
predict_calls."""

import asyncio

import pytest

from icrl.backends.in_flight import PredictAsOneCall, all_in_flight, gather_or_cancel


def test_every_request_is_in_flight_together_up_to_the_limit_and_answers_keep_their_order():
    at_once, most = 0, 0

    async def send(item, semaphore):
        nonlocal at_once, most
        async with semaphore:
            at_once += 1
            most = max(most, at_once)
            await asyncio.sleep(0.01 * (5 - item % 5))  # later items answer first
            at_once -= 1
        return item * item

    assert asyncio.run(all_in_flight(range(12), send, 3)) == [i * i for i in range(12)]
    assert most == 3


def test_a_call_answers_in_order_and_a_failed_request_leaves_none_of_the_others_running():
    async def answer(i):
        await asyncio.sleep(0.01 * (3 - i))
        return i

    assert asyncio.run(gather_or_cancel(answer(i) for i in range(3))) == [0, 1, 2]
    ended = []

    async def slow(i):
        try:
            await asyncio.sleep(60)
        finally:
            ended.append(i)

    async def fails():
        await asyncio.sleep(0.01)
        raise ValueError("refused")

    async def call():
        with pytest.raises(ValueError, match="refused"):
            await gather_or_cancel([slow(0), fails(), slow(1)])
        return sorted(ended)  # already ended when the failure reached the call

    assert asyncio.run(asyncio.wait_for(call(), 5)) == [0, 1]


def test_predict_is_one_call_and_says_its_progress_once_all_have_answered():
    class Backend(PredictAsOneCall):
        def __init__(self):
            self.calls = []

        def predict_calls(self, calls):
            self.calls += calls
            return [[f"label of {p}" for p in call.prompts] for call in calls]

    backend, said = Backend(), []
    assert backend.predict(["a", "b"], ["x"], 0.5, 7, progress=said.append) == ["label of a", "label of b"]
    assert said == [2] and len(backend.calls) == 1
    assert (backend.calls[0].temperature, backend.calls[0].seed) == (0.5, 7)
