"""The one thing every runtime thread does alike: run its work, keep the exception that ends it."""

from __future__ import annotations

import threading

import torch

__all__ = ["ThreadWorker"]


class ThreadWorker:
    """A daemon thread running :meth:`_work`; an exception is kept (with its traceback) in
    :attr:`error` for the supervisor in the main thread, instead of dying silently.
    """

    def __init__(self, name: str, torch_threads: int) -> None:
        self.error: BaseException | None = None
        self.torch_threads = torch_threads
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> bool:
        if self._thread.ident is not None:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _main(self) -> None:
        try:
            torch.set_num_threads(self.torch_threads)  # intra-op threads are chosen per role
            self._work()
        except BaseException as exc:  # noqa: BLE001 - handed to the supervisor
            self.error = exc

    def _work(self) -> None:
        raise NotImplementedError
