"""Which application a producer ID came from: its client's identity, carried with a PID
from the input to the decision, so an operator knows what to fix, not only whose it is."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass

# The identity travels as one string, its fields joined by the ASCII unit separator (a
# control character, which no client.id or host name holds): one column in Arrow and Spark
# instead of five, split again only for the decision rows.
SEP = "\x1f"
# The output columns, in the order of the joined string.
COLUMNS = ("client_id", "transactional_id", "client_address", "client_software", "broker")


@dataclass(frozen=True)
class Client:
    """One client's identity, as far as the input tells it (a field it lacks is None).

    ``client_id`` and ``transactional_id`` are the producer's settings; ``address`` is the
    client's IP as the broker saw it (the request log's ``connection``); ``software`` its
    ``clientInformation`` (``kafka-python 3.0.12``); ``broker`` the broker that granted
    the PID or served its request (a host, or a broker id). Joined, it is one string:
    ``Client("app-1", None, "10.0.0.5", None, "b1").joined()`` is
    ``"app-1␟␟10.0.0.5␟␟b1"`` (␟ = ``SEP``), and :meth:`parse` gives it back.
    """

    client_id: str | None = None
    transactional_id: str | None = None
    address: str | None = None
    software: str | None = None
    broker: str | None = None

    @classmethod
    def parse(cls, joined: str | None) -> Client | None:
        """A joined identity (``None`` or empty fields: not known) as a Client, or None."""
        if not joined:
            return None
        parts = (joined.split(SEP) + [""] * len(COLUMNS))[: len(COLUMNS)]
        client = cls(*(p or None for p in parts))
        return client if any(astuple(client)) else None

    @classmethod
    def from_row(cls, row: Mapping) -> Client | None:
        """The client columns of an output row (``COLUMNS``; NaN and empty: not known)."""
        values = [row.get(name) for name in COLUMNS]
        client = cls(*(v if isinstance(v, str) and v else None for v in values))
        return client if any(astuple(client)) else None

    def joined(self) -> str | None:
        """The identity as one string (None when nothing is known)."""
        fields = astuple(self)
        return SEP.join(f or "" for f in fields) if any(fields) else None

    def text(self) -> str:
        """One line for a person: ``client.id app-1 (kafka-python 3.0.12) at 10.0.0.5 via b1``."""
        parts = [f"client.id {self.client_id}" if self.client_id else "no client.id"]
        if self.software:
            parts.append(f"({self.software})")
        if self.transactional_id:
            parts.append(f"transactional.id {self.transactional_id}")
        if self.address:
            parts.append(f"at {self.address}")
        if self.broker:
            parts.append(f"via broker {self.broker}")
        return " ".join(parts)


def describe(joined: Iterable[str | None]) -> str:
    """Many sightings' identities as one line: the most frequent, and how many others.
    ``["a␟␟␟␟", "a␟␟␟␟", "b␟␟␟␟"]`` gives ``client.id a, +1 other client``; nothing known
    gives ``""``."""
    counts = Counter(j for j in joined if j)
    if not counts:
        return ""
    top, _ = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    client = Client.parse(top)
    if client is None:
        return ""
    more = len(counts) - 1
    tail = f", +{more} other client{'s' if more > 1 else ''}" if more else ""
    return client.text() + tail


def top(joined: Iterable[str | None]) -> str | None:
    """The most frequent known identity (ties: the greatest string, so every path agrees)."""
    counts = Counter(j for j in joined if j)
    return max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0] if counts else None
