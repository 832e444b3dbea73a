"""Writing an attempt's text to its run's stream: :class:`DeltaCoalescer` batches the engine's deltas into
``delta`` events (see ``runs.streaming.contract``) and rides out a short Redis outage; :class:`StreamLost` is what
it raises past one. Used by the generation attempt (:mod:`inference_workers.services`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from inference_workers.output_moderation import OutputGuard
from runs.streaming.contract import PendingAppend, RunStreamWriter, StreamedAnswer, StreamEvent

logger = logging.getLogger(__name__)

STREAM_ERRORS = (redis.ConnectionError, redis.TimeoutError)
"""Redis not answering (a restart, a network blip): the coalescer keeps its text and tries again."""

IDLE_WAIT_S = 0.5
"""The generation loop's wait for a delta when nothing is buffered; it also bounds how late a repeated abort
of a cancelled run goes to the engine (the cancel listener's abort normally lands within one step)."""


class StreamLost(RuntimeError):
    """The run's stream cannot be written: Redis stayed unreachable past the coalescer's outage limit, or the
    attempt lost the run's lease meanwhile. The attempt stops; the reaper requeues the run."""


@dataclass
class _Part:
    """One engine delta not yet in the stream."""

    text: str
    tokens: int
    logprobs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Sent:
    """An append on its way: the parts it carries (back in the buffer, ahead of newer ones, if it fails)."""

    pending: PendingAppend
    parts: list[_Part]
    tokens: int
    written_text: str | None
    """The answer up to and with it, for the output guard's check behind it (``retract`` mode); None without."""


class DeltaCoalescer:
    """Buffers deltas: the first text goes out at once, then every ``interval_s`` or ``max_tokens`` tokens.

    With ``logprobs`` (the run asked for them) each part keeps its tokens' logprob entries and every delta event
    carries those of its tokens, ``"logprobs": [...]``. A flush of tokens without text (special tokens the detokenizer
    skips, an end-of-sequence token under ``ignore_eos``, bytes of a character not complete yet) is written too, as a
    delta with ``"text": ""``: a client sees the tokens come, as vLLM's server streams a chunk with empty content for
    them (an answer of such tokens alone had no chunk before its end, and its time to first token was its whole
    length). Only the last flush of an attempt (:meth:`drain`) leaves a text-less remainder out when it carries no
    logprobs: the terminal event that follows at once counts its tokens.

    A flush does not wait for Redis's reply when the writer batches (``STREAM_BATCHED_WRITES``): the append goes to
    the process's stream writer and its outcome is read at the next flush, or by :meth:`drain`, which waits for it.
    At most one append is on its way; one that failed puts its text back in the buffer, ahead of the newer text. A
    task thread so wakes once a flush, not once more for the reply.

    It rides out a short Redis outage (a restart): an append that fails keeps its text buffered and the next
    flush, ``retry_s`` later, tries again, so generation goes on and nothing is lost or sent twice. Before the
    first write after an outage it checks that this attempt still holds the run (``owns``: its lease may have
    expired meanwhile and the run been requeued), whether the failed append had reached Redis after all (only
    its reply lost), and whether the stream lost entries (Redis restarted without them): then a ``reset`` and
    the whole text so far go out, so a client's text is exact again. An append that went through (redis-py's
    retries reconnected it, to a restarted Redis or a promoted replica) but found entries missing before its own
    (``RunStreamWriter.gap``) is repaired the same way. Past ``outage_limit_s`` without Redis,
    or without the lease, it raises :class:`StreamLost`.
    """

    def __init__(
        self,
        writer: RunStreamWriter,
        *,
        interval_s: Callable[[], float],
        max_tokens: int,
        owns: Callable[[], bool] = lambda: True,
        outage_limit_s: float = 10.0,
        retry_s: float = 0.25,
        logprobs: bool = False,
        guard: OutputGuard | None = None,
    ) -> None:
        self.writer = writer
        self.interval_s = interval_s
        """Called at each flush decision: the interval grows with the number of live streams."""
        self.max_tokens = max_tokens
        self.owns = owns
        self.outage_limit_s = outage_limit_s
        self.retry_s = retry_s
        self.logprobs = logprobs
        self.guard = guard
        """The output moderation pass, when the run's tier checks its answer: in ``holdback`` mode nothing is
        written until a window is buffered and checked; in ``retract`` mode each window is checked once written.
        Either raises :class:`~inference_workers.output_moderation.OutputFlagged` from :meth:`add`, :meth:`flush`
        or :meth:`drain`."""
        self.parts: list[_Part] = []
        """Deltas not yet in the stream."""
        self.text_parts: list[str] = []
        self.logprob_entries: list[dict[str, Any]] = []
        """Every logprob entry so far (with ``logprobs``): a resend after lost entries sends them all again."""
        self.tokens = 0
        self.prompt_tokens: int | None = None
        """The prompt's length as the engine counted it, once known: the first delta written carries it (an
        OpenAI stream's running usage, ``stream_options.continuous_usage_stats``)."""
        self.last_flush = 0.0
        self.flushes = 0
        self._down_since: float | None = None
        self._next_try = 0.0
        self._draining = False
        """:meth:`drain` is writing the attempt's last flush."""
        self._unsure: tuple[int, int] | None = None
        """(id, parts) of a failed append that Redis may have applied anyway."""
        self._buffered = 0
        """Tokens of :attr:`parts`."""
        self._sent: _Sent | None = None
        """The append on its way, its reply not read yet (at most one: each flush reads the last one's first)."""

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def seed(self, answer: StreamedAnswer) -> None:
        """Starts from an answer already in the stream (an earlier attempt's, which this one continues): it counts
        in :attr:`text`, :attr:`tokens` and the logprob entries, and a resend after lost entries sends it too,
        but it is not written again. The first new text still goes out at once, without ``prompt_tokens``."""
        self.text_parts = [answer.text]
        self.tokens = answer.tokens
        self.logprob_entries = list(answer.logprobs) if self.logprobs else []

    @property
    def buffered_tokens(self) -> int:
        """Tokens not yet sent to the stream (an append on its way and failed counts again)."""
        return self._buffered

    def add(self, text: str, tokens: int, logprobs: list[dict[str, Any]] | None = None, *, flush: bool = True) -> None:
        """Buffers one delta and flushes as :meth:`flush_when_due` says; ``flush=False``: buffers it alone (a caller
        adding a batch of deltas flushes once after the last, so one flush carries the whole batch)."""
        if text or tokens:
            entries = list(logprobs or []) if self.logprobs else []
            self.parts.append(_Part(text, tokens, entries))
            self._buffered += tokens
            self.text_parts.append(text)
            self.logprob_entries.extend(entries)
            self.tokens += tokens
        if flush:
            self.flush_when_due()

    def flush_when_due(self) -> None:
        """Flushes what is buffered when it should go: the first text at once, then every ``interval_s`` or
        ``max_tokens`` tokens (in ``holdback`` mode, once a window is buffered)."""
        if not self.parts or self._holding_back():
            return
        if self.flushes == 0 or self._buffered >= self.max_tokens:
            self.flush()
        else:
            self.flush_if_due()

    def _holding_back(self) -> bool:
        """In ``holdback`` mode, until a window of tokens is buffered (then it is checked and written)."""
        guard = self.guard
        return guard is not None and guard.holds_back and self._buffered < guard.window

    def wait_s(self) -> float:
        """How long the generation loop may wait for the next delta: until a buffered flush is due, else
        ``IDLE_WAIT_S`` (a thread per run waking every flush interval for nothing was most of a worker's CPU
        between tokens)."""
        if not self.parts or self._holding_back():
            return IDLE_WAIT_S
        due = self._flushed_at() + self.interval_s()
        if self._down_since is not None:  # Redis is out: the next try, not a spin until it is back
            due = max(due, self._next_try)
        return max(0.001, due - time.monotonic())

    def hold_s(self) -> float:
        """How long the generation loop may leave a new delta waiting before it takes it (with whatever else
        arrives meanwhile): until the next flush is due, since nothing taken earlier would go out earlier. 0 before
        the first flush (the first text goes at once) and while the output guard holds text back (it flushes on a
        token count)."""
        if self.flushes == 0 or self._holding_back() or (self.guard is not None and self.guard.holds_back):
            return 0.0
        due = self._flushed_at() + self.interval_s()
        if self._down_since is not None:
            due = max(due, self._next_try)
        return max(0.0, due - time.monotonic())

    def _flushed_at(self) -> float:
        """When the last flush was done: when Redis answered it, once it has (a writer that lags makes flushes
        rarer, as when the thread waited for each reply), else when it was sent."""
        sent = self._sent
        if sent is not None and sent.pending.done:
            return max(self.last_flush, sent.pending.answered_at)
        return self.last_flush

    def flush_if_due(self) -> None:
        if self._sent is not None and self._sent.pending.done:  # a failure is seen without waiting for a delta
            self.settle()
        if self.parts and not self._holding_back() and time.monotonic() - self.last_flush >= self.interval_s():
            self.flush()

    def flush(self) -> None:
        """Reads the outcome of the append on its way (waiting for it if need be), then sends what is buffered. With
        a batching writer the append is not waited for: its outcome is read at the next flush (or :meth:`drain`)."""
        self.settle()
        if not self.parts:
            return
        now = time.monotonic()
        if self._down_since is not None and now < self._next_try:
            return
        try:
            if self._down_since is not None:
                self._resume()
            self._send_buffered()
        except STREAM_ERRORS as exc:  # _resume's reads (an append's own failure is read by settle)
            self._failed(exc, now)
            return
        if self._sent is None:
            if self._down_since is not None:  # nothing left to send: _resume's reads found Redis answering
                self._up(now)
        elif self._sent.pending.done:  # sent at once (no batcher): its failure is seen now, as it happened
            self.settle()

    def drain(self) -> None:
        """Flushes what is buffered and waits for it to be written, waiting out a Redis outage (up to the limit,
        then :class:`StreamLost`); the guard's last window is checked (before it is written in ``holdback`` mode,
        after in ``retract`` mode)."""
        self._draining = True
        while True:
            self.flush()
            self.settle()
            if not self.parts and self._sent is None:
                break
            time.sleep(self.retry_s)
        if self.guard is not None:
            self.guard.check(self.text)

    def abandon(self) -> None:
        """Waits for the append on its way, whatever its outcome, and forgets it: an attempt that stops without
        :meth:`drain` (its engine died, its stream was lost) leaves nothing landing in the stream after its lease is
        released, when another attempt may take the run over from what the stream shows."""
        sent, self._sent = self._sent, None
        if sent is None:
            return
        try:
            sent.pending.result()
        except redis.RedisError as exc:  # the text it carried is lost with the attempt; the next one goes on without
            logger.info("run %s: the stopped attempt's last append failed (%s)", self.writer.run_id, exc)

    def _send_buffered(self) -> None:
        """Sends every buffered part as one ``delta`` (or drops a text-less last one: see the class), without
        waiting for the reply: :attr:`_sent` until :meth:`settle` reads it."""
        if self.guard is not None and self.guard.holds_back:
            self.guard.check(self.text)  # the window before it is written: a flagged one never is
        parts, tokens = self.parts, self._buffered
        self.parts, self._buffered = [], 0
        text = "".join(part.text for part in parts)
        data: dict[str, Any] = {"text": text, "tokens": tokens}
        if self.flushes == 0 and self.prompt_tokens is not None:
            data["prompt_tokens"] = self.prompt_tokens
        if self.logprobs:
            data["logprobs"] = [entry for part in parts for entry in part.logprobs]
        self.last_flush = time.monotonic()
        behind = self.guard if self.guard is not None and not self.guard.holds_back else None
        if not (text or data.get("logprobs") or (tokens and not self._draining)):
            if behind is not None:
                behind.written(self.text, tokens)
            return
        pending = self.writer.append_later(StreamEvent.DELTA, data)
        self._sent = _Sent(pending, parts, tokens, self.text if behind is not None else None)
        self.flushes += 1

    def settle(self) -> None:
        """Reads the outcome of the append on its way: written (the output guard checks behind it; entries Redis
        had lost before it are repaired), or failed (its parts go back to the buffer, ahead of the newer ones, and
        the coalescer waits out the outage)."""
        sent = self._sent
        if sent is None:
            return
        self._sent = None
        try:
            sent.pending.result()
        except STREAM_ERRORS as exc:
            self._unsure = (sent.pending.seq, len(sent.parts))  # Redis may have applied it anyway
            self.flushes -= 1
            self.parts[:0] = sent.parts
            self._buffered += sent.tokens
            self._failed(exc, time.monotonic())
            return
        self.last_flush = max(self.last_flush, sent.pending.answered_at)
        if self._down_since is not None:
            self._up(time.monotonic())
        if self.guard is not None and sent.written_text is not None:
            self.guard.written(sent.written_text, sent.tokens)  # checks behind, once a window of new text is out
        if self.writer.gap is not None:  # it went through, after entries Redis had lost
            try:
                self._repair(*self.writer.gap)
            except STREAM_ERRORS as exc:  # the next flush's _resume finds the entries missing again
                self._failed(exc, time.monotonic())
                return
            self._send_buffered()

    def _failed(self, exc: Exception, now: float) -> None:
        """Redis did not answer: the text stays buffered and the next flush tries ``retry_s`` later; past
        ``outage_limit_s`` of failures, :class:`StreamLost`."""
        if self._down_since is None:
            self._down_since = now
            logger.warning("run %s: its stream is unreachable (%s); buffering the text", self.writer.run_id, exc)
        if now - self._down_since > self.outage_limit_s:
            raise StreamLost(f"Redis unreachable for {now - self._down_since:.1f} s") from exc
        self._next_try = now + self.retry_s

    def _up(self, now: float) -> None:
        if self._down_since is not None:
            logger.info("run %s: stream reachable again after %.1f s", self.writer.run_id, now - self._down_since)
            self._down_since = None

    def _resume(self) -> None:
        """The first write after Redis errors: is the run still ours, and what does its stream hold?"""
        if not self.owns():
            raise StreamLost("the attempt lost the run's lease while Redis was unreachable")
        last = self.writer.last_in_stream()
        if self._unsure is not None:
            seq, count = self._unsure
            self._unsure = None
            if last >= seq:  # it had been written; only its reply was lost
                self.writer.written_up_to(seq)
                self.flushes += 1
                del self.parts[:count]
                self._buffered = sum(part.tokens for part in self.parts)
        if last < self.writer.seq:  # Redis came back without entries it had acknowledged
            self._repair(last + 1, self.writer.seq)

    def _repair(self, first: int, last: int) -> None:
        """The stream lost entries ``first``..``last`` (Redis restarted or failed over without them): a ``reset``
        and the whole text so far go out, so a client's text is exact again."""
        logger.warning("run %s: its stream lost entries %s-%s; resending the text", self.writer.run_id, first, last)
        self.writer.append(StreamEvent.RESET, {})
        self.writer.gap = None
        self.parts = [_Part(self.text, self.tokens, list(self.logprob_entries))]
        self._buffered = self.tokens
