"""The tasks a Manager runs, each with a typed role.

What a task's end means depends on what it is: a controller that ends has drained, a shared
watch that fails leaves controllers deaf, the end of leader election or of the task that
follows its terms means this replica may not act any more. The Manager keeps each task with
its `Role` (and its controller, for controller tasks) instead of telling them apart by
their names.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterator
from dataclasses import dataclass

from fastctl.runtime.controller import Controller

__all__ = ["Role", "Task", "Tasks"]


class Role(enum.Enum):
    CONTROLLER = "controller"
    SHARED_WATCH = "shared watch"
    SHARD_MEMBERSHIP = "shard membership"
    LEADER_ELECTION = "leader election"
    LEADERSHIP = "leadership"
    """Follows the elector's terms: opens the leader gate, raises when a term ends."""


@dataclass(frozen=True, slots=True)
class Task:
    role: Role
    task: asyncio.Task[None]
    name: str
    controller: Controller | None = None

    def __str__(self) -> str:
        return f"{self.role.value} {self.name}".rstrip()


class Tasks:
    """The Manager's running tasks, by role."""

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[None], Task] = {}

    def add(
        self,
        role: Role,
        task: asyncio.Task[None],
        name: str = "",
        controller: Controller | None = None,
    ) -> asyncio.Task[None]:
        self._tasks[task] = Task(role, task, name, controller)
        return task

    def __iter__(self) -> Iterator[Task]:
        return iter(list(self._tasks.values()))

    def __len__(self) -> int:
        return len(self._tasks)

    def of(self, task: asyncio.Task[None]) -> Task:
        return self._tasks[task]

    def with_role(self, *roles: Role) -> set[asyncio.Task[None]]:
        return {t.task for t in self._tasks.values() if t.role in roles}

    def all(self) -> set[asyncio.Task[None]]:
        return set(self._tasks)

    def leadership(self) -> set[asyncio.Task[None]]:
        """The tasks whose end means this replica may no longer act: the elector and the
        task that follows its terms."""
        return self.with_role(Role.LEADER_ELECTION, Role.LEADERSHIP)
