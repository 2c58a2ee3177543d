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
