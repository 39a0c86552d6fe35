"""The openai engine's thread pool: daemon threads, so an interrupted run exits at once
instead of waiting for calls the server may take minutes to answer (a
``ThreadPoolExecutor`` joins its threads at interpreter exit)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

_T = TypeVar("_T")


class Workers:
    """A fixed number of daemon threads running submitted calls."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._tasks: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], _T]) -> Future[_T]:
        future: Future[_T] = Future()
        self._tasks.put((future, fn))
        with self._lock:
            if len(self._threads) < self._size:
                thread = threading.Thread(target=self._loop, name="suffice-openai", daemon=True)
                thread.start()
                self._threads.append(thread)
        return future

    def _loop(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            future, fn = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    def close(self) -> None:
        """Cancel what has not started; each thread ends after its current call."""
        with self._lock:
            while True:
                try:
                    task = self._tasks.get_nowait()
                except queue.Empty:
                    break
                if task is not None:
                    task[0].cancel()
                    # Marks it done for wait(): no worker will pick it up to do so.
                    task[0].set_running_or_notify_cancel()
            for _ in self._threads:
                self._tasks.put(None)
            self._threads.clear()
