"""The bounded, closable channel that feeds a controller's applier."""

from __future__ import annotations

import asyncio

import pytest

from fastctl._channel import Channel, ChannelClosed


async def test_items_arrive_in_order_and_close_ends_the_iteration_after_draining() -> None:
    channel: Channel[int] = Channel(maxsize=10)
    for i in range(5):
        await channel.put(i)
    channel.close()
    assert [item async for item in channel] == [0, 1, 2, 3, 4]


async def test_a_full_channel_blocks_the_producer_until_the_consumer_takes() -> None:
    channel: Channel[int] = Channel(maxsize=2)
    await channel.put(1)
    await channel.put(2)
    blocked = asyncio.create_task(channel.put(3))
    await asyncio.sleep(0.01)
    assert not blocked.done()
    assert len(channel) == 2
    it = aiter(channel)
    assert await anext(it) == 1
    await asyncio.wait_for(blocked, 1)
    assert [await anext(it), await anext(it)] == [2, 3]


async def test_close_releases_blocked_producers_and_refuses_new_items() -> None:
    channel: Channel[int] = Channel(maxsize=1)
    await channel.put(1)
    blocked = asyncio.create_task(channel.put(2))
    await asyncio.sleep(0.01)
    channel.close()
    with pytest.raises(ChannelClosed):
        await blocked
    with pytest.raises(ChannelClosed):
        await channel.put(3)
    assert [item async for item in channel] == [1]


async def test_close_wakes_a_waiting_consumer() -> None:
    channel: Channel[int] = Channel()
    consumer = asyncio.create_task(anext(aiter(channel), None))
    await asyncio.sleep(0.01)
    channel.close()
    assert await asyncio.wait_for(consumer, 1) is None


def test_maxsize_must_be_positive() -> None:
    with pytest.raises(ValueError, match="maxsize must be >= 1"):
        Channel(maxsize=0)


# -- a sink attached instead of a consumer ---------------------------------------------------


async def test_an_attached_sink_takes_the_buffered_items_then_each_put_at_once() -> None:
    channel: Channel[int] = Channel(maxsize=10)
    await channel.put(1)
    await channel.put(2)
    got: list[int] = []
    channel._attach(got.append, lambda: got.append(-1))
    assert got == [1, 2]
    assert len(channel) == 0
    await channel.put(3)
    assert got == [1, 2, 3]  # in the put, with no task of the consumer's in between
    channel.close()
    assert got == [1, 2, 3, -1]
    with pytest.raises(ChannelClosed):
        await channel.put(4)


async def test_a_sink_attached_to_a_closed_channel_is_told_at_once() -> None:
    channel: Channel[int] = Channel()
    await channel.put(1)
    channel.close()
    got: list[int] = []
    channel._attach(got.append, lambda: got.append(-1))
    assert got == [1, -1]


async def test_producers_blocked_on_a_full_channel_go_on_into_the_sink() -> None:
    channel: Channel[int] = Channel(maxsize=1)
    await channel.put(1)
    blocked = asyncio.create_task(channel.put(2))
    await asyncio.sleep(0.01)
    got: list[int] = []
    channel._attach(got.append, lambda: None)
    await asyncio.wait_for(blocked, 1)
    assert got == [1, 2]
    assert len(channel) == 0


async def test_a_producer_into_a_sink_lets_the_loop_run_once_every_maxsize_puts() -> None:
    """A long run of puts (a relist's triggers) does not hold the loop: other tasks run
    between every `maxsize` of them."""
    channel: Channel[int] = Channel(maxsize=4)
    got: list[int] = []
    channel._attach(got.append, lambda: None)
    seen: list[int] = []

    async def other() -> None:
        while len(got) < 12:
            seen.append(len(got))
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)  # `other` runs once: nothing put yet
    for i in range(12):
        await channel.put(i)
    await task
    assert seen == [0, 4, 8]


async def test_a_detached_channel_buffers_again_and_a_second_consumer_is_refused() -> None:
    channel: Channel[int] = Channel(maxsize=4)
    got: list[int] = []
    channel._attach(got.append, lambda: None)
    with pytest.raises(RuntimeError, match="consumer already"):
        channel._attach(got.append, lambda: None)
    channel._detach()
    await channel.put(5)
    assert got == []
    assert len(channel) == 1
    channel.close()
    assert [item async for item in channel] == [5]
