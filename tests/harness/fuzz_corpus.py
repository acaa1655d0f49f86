"""A seeded fuzz corpus: valid events mixed with many kinds of malformed records.

Each malformed record comes with the reason (a substring) its dead letter must
carry, so a test can check that every dead letter says *why*, not just that
it was dropped.
"""

from __future__ import annotations

import json
import random

# what a dead letter's reason must contain, per kind of damage
NOT_JSON = "not valid JSON"
TOO_NESTED = "too many '{' or '['"
REASONS = (
    "empty record",
    TOO_NESTED,
    NOT_JSON,
    "not a JSON object",
    "text after the object",
    "missing required field",
    "must be an integer",
    "must be a string",
    "is out of range",
    "principal is empty",
    "principal is longer than",
)


def valid_events(rng: random.Random, n: int) -> list[dict]:
    """Events of a few steady users and a few that churn PIDs, over ~20 minutes."""
    out = []
    for i in range(n):
        user = rng.randrange(12)
        churn = user < 4
        pid = (user * 1_000_000 + (i if churn else rng.randrange(5))) if user != 11 else -1
        e = {"timestamp": 1_700_000_000_000 + i * 250, "principal": f"User:u{user}", "producer_id": pid}
        if rng.random() < 0.3:
            e.update(producer_epoch=rng.randrange(3), client_id=f"c{user}", broker_id=rng.randrange(6))
        out.append(e)
    return out


def _event(rng: random.Random) -> dict:
    return {"timestamp": 1_700_000_000_000, "principal": f"User:f{rng.randrange(5)}", "producer_id": 7}


def _deep(rng: random.Random, depth: int) -> str:
    if rng.random() < 0.5:
        return '{"a":' * depth + "1" + "}" * depth
    return "[" * depth + "]" * depth


def _bad(rng: random.Random, kind: int) -> tuple[str | bytes, str]:  # noqa: C901 - a table of cases
    e = _event(rng)
    text = json.dumps(e)
    if kind == 0:
        return text[: rng.randrange(1, len(text) - 1)], NOT_JSON  # truncated
    if kind == 1:
        field = rng.choice(["timestamp", "producer_id", "producer_epoch", "broker_id", "partition"])
        e[field] = rng.choice(["5", True, [1], {"x": 1}, "", "1e3"])
        return json.dumps(e), f"field '{field}' must be an integer"
    if kind == 2:
        field = rng.choice(["principal", "client_id", "topic", "transactional_id"])
        e[field] = rng.choice([5, 1.5, True, [], {"k": "v"}])
        return json.dumps(e), f"field '{field}' must be a string"
    if kind == 3:
        field = rng.choice(["timestamp", "producer_id"])
        literal = rng.choice(["5.5", "5.0", "1e2", "-0.5", "7E3", "1.0e400"])
        return text.replace(
            f'"{field}": {e[field]}', f'"{field}": {literal}'
        ), f"field '{field}' must be an integer"
    if kind == 4:
        field = rng.choice(["timestamp", "producer_id"])
        digits = rng.choice([20, 39, 400, 5000])
        literal = "9" * digits
        return text.replace(
            f'"{field}": {e[field]}', f'"{field}": {literal}'
        ), f"field '{field}' is out of range"
    if kind == 5:
        return "\ufeff" + text[:-1], NOT_JSON  # a BOM before broken JSON
    if kind == 6:
        e["principal"] = rng.choice(["\t", "\n\t", "\r\n", " \t ", "\u00a0", "\x01\x02"])
        return json.dumps(e), "principal is empty"
    if kind == 7:
        return text[:-1] + ', "p": "a\x01b"}', NOT_JSON  # an unescaped control character
    if kind == 8:
        deep = _deep(rng, rng.choice([65, 999, 1000, 1001, 5000, 20000]))
        if rng.random() < 0.5:
            return deep, TOO_NESTED
        return text[:-1] + ', "x": ' + deep + "}", TOO_NESTED
    if kind == 9:
        e["principal"] = "x" * rng.choice([257] * 30 + [10_000, 1_000_000])
        return json.dumps(e), "principal is longer than"
    if kind == 10:
        junk = bytes(
            rng.choice([b for b in range(256) if b not in (10, 13)]) for _ in range(rng.randrange(1, 200))
        )
        return (b"\xff" + junk), NOT_JSON  # binary junk (never valid UTF-8, never a line break)
    if kind == 11:
        return rng.choice(["", " ", "\t", "   \t  "]), "empty record"
    if kind == 12:
        return rng.choice(["[1, 2]", "5", '"s"', "null", "true"]), "not a JSON object"
    if kind == 13:
        return text + rng.choice([" x", "}", " {}", ",1"]), "text after the object"
    if kind == 14:
        field = rng.choice(["timestamp", "principal", "producer_id"])
        del e[field]
        return json.dumps(e), f"missing required field '{field}'"
    e["producer_epoch"] = rng.choice([-2, 32768, 2**40])
    return json.dumps(e), "field 'producer_epoch' is out of range"


KINDS = 16


def corpus(seed: int, n_valid: int, n_bad: int) -> tuple[list[dict], list[tuple[str | bytes, str | None]]]:
    """(valid events, records in order): each record is (line, expected reason or None if valid).
    Valid events sometimes carry trailing whitespace or a BOM, which are tolerated."""
    rng = random.Random(seed)
    events = valid_events(rng, n_valid)
    records: list[tuple[str | bytes, str | None]] = []
    for e in events:
        line = json.dumps(e)
        r = rng.random()
        if r < 0.05:
            line += rng.choice([" ", "\t", "  \t"])
        elif r < 0.07:
            line = "\ufeff" + line
        records.append((line, None))
    records += [_bad(rng, i % KINDS) for i in range(n_bad)]
    rng.shuffle(records)
    return events, records


def as_bytes(line: str | bytes) -> bytes:
    return line if isinstance(line, bytes) else line.encode("utf-8")
