"""The openai engine: requests run concurrently, each segment by segment, with at most
``max_concurrency`` HTTP calls in flight per engine, shared by every thread that calls
it (``suffice serve`` judges each of its requests on its own thread)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION
from concurrent.futures import wait as wait_all
from functools import partial

import httpx

from suffice.exceptions import (
    CancelledError,
    ConfigError,
    EngineError,
    EngineFatalError,
    EngineUnreachableError,
    PartialBatchError,
)
from suffice.serving.base import Engine, Generation, GenerationRequest, Message, Progress
from suffice.serving.engine_config import EngineConfig
from suffice.serving.openai.client import Client, ServerError
from suffice.serving.openai.handshake import check_tokenizer, pick_model
from suffice.serving.openai.scheduling import Given, Scheduling
from suffice.serving.openai.segments import Aborted, SegmentGenerator
from suffice.serving.openai.tokens import LocalTokenizer, Tokens
from suffice.serving.openai.workers import Workers

#: How often a waiting call checks its cancel event (seconds).
_CANCEL_POLL = 0.5
#: Requests refused in a row (the same HTTP status, none answered in between) after which
#: the server is taken to refuse every request (a --tokenizer of another model makes every
#: completion "out of vocabulary"): the run stops instead of writing an error row for each.
REFUSED_IN_A_ROW = 32


class OpenAIEngine(Engine):
    """An existing vLLM OpenAI-compatible server, driven through ``/v1/completions``.

    ``transport`` replaces the network (tests pass an ``httpx.MockTransport``).
    """

    def __init__(self, config: EngineConfig, *, transport: httpx.BaseTransport | None = None) -> None:
        if config.base_url is None:
            raise ConfigError("base_url", None, "the openai engine needs the server's address")
        self.config = config
        self._client = Client(config, transport)
        self.base_url = self._client.base_url
        self.backend = config.backend_name
        self._workers = Workers(config.concurrency)
        self._closed = False
        #: Requests refused in a row with one status: (status, the first one's message, count).
        self._refused: tuple[int, str, int] | None = None
        self._lock = threading.Lock()
        self._progress_lock = threading.Lock()
        try:
            local = LocalTokenizer(config.tokenizer) if config.tokenizer is not None else None
            self._served, server_len = pick_model(self._client, config.served_model)
            self.model_id = self._served["served_model"]
            server_max_len = server_len or config.max_model_len or 0
            if not server_max_len:
                raise ConfigError(
                    "max_model_len", None, f"the server at {self.base_url} does not say its context window: give it"
                )
            self.max_model_len = min(server_max_len, config.max_model_len or server_max_len)
            self._tokens = Tokens(self._client, local, self.model_id)
            check_tokenizer(self._client, self._tokens, config.tokenizer)
            self.scheduling = Scheduling(self._client)
            self._segments = SegmentGenerator(self._client, self._tokens, config, server_max_len, self.scheduling)
        except BaseException:
            self.close()
            raise

    @classmethod
    def settings_of(cls, config: EngineConfig) -> dict[str, str]:
        return config.recorded(
            {
                "model": config.served_model or "the server's only model",
                "weights": config.base_url or "",
                "engine": config.kind,
                "backend": config.backend_name,
                "max_model_len": "server's own" if config.max_model_len is None else str(config.max_model_len),
            }
        )

    def served(self) -> dict[str, str]:
        """The model the server answered with at start: its name and what it loaded
        (``root``), so a resume against a server that now serves another model is refused."""
        return dict(self._served)

    def check_alive(self) -> None:
        self._client.check_alive()

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self._tokens.count(texts)

    def truncate(self, text: str, max_tokens: int) -> str:
        return self._tokens.truncate(text, max_tokens)

    def prompt_tokens(self, messages: Sequence[Message]) -> int:
        return len(self._tokens.prompt_ids(messages))

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> list[Generation]:
        """Every request's segments, each continuing the same token sequence; requests run
        concurrently (at most ``max_concurrency`` calls in flight for this engine).  Each
        request is its own HTTP calls: when some of several fail on their own,
        :class:`PartialBatchError` carries every outcome, so nothing need be sent again."""
        if not requests:
            return []
        if self._closed:
            raise EngineFatalError("the openai engine is closed")
        aborted = threading.Event()  # this call's requests stop early once it has failed fatally
        cuts_before = self._client.cuts
        futures = [self._workers.submit(partial(self._run, request, progress, aborted)) for request in requests]
        fatal: BaseException | None = None
        pending = set(futures)
        while pending:
            done, pending = wait_all(pending, timeout=_CANCEL_POLL, return_when=FIRST_EXCEPTION)
            closed, withdrawn = self._closed, cancel is not None and cancel.is_set()
            if fatal is None and not (closed or withdrawn):
                fatal = next((f.exception() for f in done if _is_fatal(f.exception())), None)
            if closed or withdrawn or fatal is not None:
                aborted.set()  # calls in flight are dropped when they return
                for future in pending:
                    future.cancel()
            if closed:
                raise EngineFatalError("the openai engine was closed while it generated")
            if withdrawn:
                raise CancelledError("the caller withdrew the request")
        if fatal is not None:
            if isinstance(fatal, EngineUnreachableError) and self._client.cuts > cuts_before:
                # A request of this call was cut while the server worked on it: the
                # server died with requests in flight, whichever failure came back first.
                raise self._client.went_away(str(fatal)) from fatal
            raise fatal
        outcomes = [future.exception() or future.result() for future in futures]
        unexpected = next((o for o in outcomes if not isinstance(o, Generation | EngineError)), None)
        if unexpected is not None:
            raise unexpected
        failures = [o for o in outcomes if isinstance(o, EngineError)]
        if not failures:
            return [o for o in outcomes if isinstance(o, Generation)]
        first = failures[0]
        if len(requests) == 1:
            raise first
        several = f"{len(failures)} of {len(requests)} requests failed; the first: {first}"
        raise PartialBatchError(str(first) if len(failures) == 1 else several, outcomes) from first

    def _run(self, request: GenerationRequest, progress: Progress | None, aborted: threading.Event) -> Generation:
        """One request, segment by segment (on a worker thread)."""
        if aborted.is_set():
            raise Aborted
        try:
            prompt = self._tokens.prompt_ids(request.messages)
            with self.scheduling.turn(prompt, request.constraint, lambda: aborted.is_set() or self._closed) as (
                priority,
                finished,
            ):
                generation = self._segments.generate(request, aborted, prompt, priority)
                finished(generation.completion_tokens + generation.prompt_tokens - len(prompt))
        except Given:
            raise Aborted from None
        except ServerError as exc:
            self._count_refused(exc)
            raise
        except (EngineError, Aborted):
            raise
        except Exception as exc:  # a malformed answer fails this request, not the run
            raise EngineError(f"the server at {self.base_url} answered in an unexpected form: {exc!r}") from exc
        with self._lock:
            self._refused = None
        if progress is not None:
            with self._progress_lock:  # callers' progress bars expect one thread at a time
                progress(1)
        return generation

    def _count_refused(self, error: ServerError) -> None:
        """Raise :class:`EngineFatalError` once :data:`REFUSED_IN_A_ROW` requests in a row
        were refused with the same status and none answered: the server refuses them all."""
        with self._lock:
            if self._refused is None or self._refused[0] != error.status:
                self._refused = (error.status, str(error), 1)
            else:
                self._refused = (error.status, self._refused[1], self._refused[2] + 1)
            status, first, count = self._refused
        if count < REFUSED_IN_A_ROW:
            return
        raise EngineFatalError(
            f"the server at {self.base_url} refused the last {count} requests in a row (HTTP {status}) and "
            f"answered none in between (the first: {first}): it refuses every request, so nothing more is judged in "
            "this run (a --tokenizer of another model, or a server that cannot take these constraints?); "
            "what was done is kept, rerun to resume once that is fixed"
        )

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._client.close()  # first: a request in flight stops before its next segment
        self._workers.close()


def _is_fatal(error: BaseException | None) -> bool:
    """Whether a request's failure ends the whole call (a dead or unusable server, an interrupt)."""
    return isinstance(error, EngineFatalError) or (error is not None and not isinstance(error, Exception))
