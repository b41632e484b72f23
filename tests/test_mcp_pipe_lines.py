"""The MCP server's stdin read on the event loop: lines as sent, an oversized one refused by id."""

from __future__ import annotations

import asyncio
import json

from keymem.services.mcp import stdio
from keymem.services.mcp.stdio import GuardedLines, Oversized, PipeLines


def fed(chunks: list[bytes]) -> asyncio.StreamReader:
    """A reader that ``chunks`` reach one read at a time (call inside a running loop)."""
    reader = asyncio.StreamReader()

    async def send() -> None:
        for chunk in chunks:
            reader.feed_data(chunk)
            await asyncio.sleep(0.001)  # the reader takes it before the next arrives
        reader.feed_eof()

    SENDING.add(asyncio.create_task(send()))
    return reader


SENDING: set[asyncio.Task[None]] = set()


async def lines_of(chunks: list[bytes], line_limit: int) -> list[str | Oversized]:
    """What ``PipeLines`` makes of ``chunks``."""
    return [line async for line in PipeLines(fed(chunks), line_limit)]


def test_lines_split_and_joined_across_reads_come_out_whole() -> None:
    chunks = [b'{"a":1}\n{"b"', b':"\xed\x95\x9c', b'\xea\xb8\x80"}\n\n{"c":3}\n{"tail":', b"4}"]
    assert asyncio.run(lines_of(chunks, 1_000)) == [
        '{"a":1}',
        '{"b":"한글"}',
        "",
        '{"c":3}',
        '{"tail":4}',  # the last line needs no newline
    ]


def test_a_line_past_the_limit_is_skipped_to_its_end_with_its_head_and_size() -> None:
    long_line = b'{"jsonrpc":"2.0","id":7,"params":"' + b"x" * 500 + b'"}'
    chunks = [
        b'{"before":1}\n',
        long_line[:100],
        long_line[100:300],
        long_line[300:] + b'\n{"n":2}\n',
    ]
    before, skipped, after = asyncio.run(lines_of(chunks, 64))
    assert before == '{"before":1}' and after == '{"n":2}'
    assert isinstance(skipped, Oversized)
    assert skipped.size == len(long_line)
    assert skipped.head.startswith('{"jsonrpc":"2.0","id":7')
    assert stdio.oversized_refusal(skipped).id == 7


def test_the_guard_answers_an_oversized_line_and_passes_the_rest() -> None:
    async def run() -> tuple[list[str], list[object]]:
        ok = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        chunks = [ok.encode() + b'\n{"id":"big","x":"', b"y" * 200, b'"}\n']
        guarded = GuardedLines(PipeLines(fed(chunks), 100))
        answers: list[object] = []

        class Answers:
            async def send(self, message: object) -> None:
                answers.append(message)

        guarded.answers = Answers()  # type: ignore[assignment]
        guarded.ready.set()
        return [line async for line in guarded], answers

    passed, answers = asyncio.run(run())
    assert passed == [json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})]
    (answer,) = answers
    refusal = answer.message  # type: ignore[attr-defined]
    assert refusal.id == "big" and "keymem takes at most" in refusal.error.message
