"""Which client addresses a principal has to itself: an address-based control (KIP-612's
``connection_creation_rate`` on an IP) slows every client from that address, so pidquota
puts one only on an address from which no other principal's PID was ever decided.

Fed each batch's decisions as ``(principal, address, throttled)``; pure and clock-free.
An address seen from two principals is **shared** for good (behind NAT, a proxy, a shared
host). A principal's addresses are those of its THROTTLE decisions, the newest
``per_principal`` of them. At most ``max_addresses`` addresses are remembered, the least
recently seen forgotten first, except the addresses pidquota holds a control on
(``held``); at a restart the journal's addresses are known again (:meth:`own`).

Worked example: batch 1 has ``(User:crash, 10.0.0.5, True)`` and ``(User:steady, 10.0.0.7,
False)``: ``exclusive("User:crash")`` is ``("10.0.0.5",)``. Batch 2 has ``(User:steady,
10.0.0.5, False)``: :meth:`add` returns ``{"10.0.0.5"}`` (newly shared), and
``exclusive("User:crash")`` is ``()``.

What it cannot see: clients that never ask for a PID (consumers, admin tools) on the same
address. docs/enforcing.md says so.
"""

from __future__ import annotations

from collections.abc import Iterable

_SHARED = ""  # the owner of an address seen from more than one principal


class AddressBook:
    def __init__(self, per_principal: int = 4, max_addresses: int = 100_000):
        self.per_principal, self.max_addresses = per_principal, max_addresses
        self.owner: dict[str, str] = {}  # address -> its one principal, or _SHARED
        self.recent: dict[str, list[str]] = {}  # principal -> its throttled addresses, newest last
        self.held: set[str] = set()  # addresses with a control on them now: never forgotten

    def own(self, address: str, principal: str) -> None:
        """An address pidquota holds a control on for ``principal`` (from the journal, at a
        restart): known as that principal's until another principal turns up there."""
        if address not in self.owner:
            self.owner[address] = principal

    def shared(self, address: str) -> bool:
        return self.owner.get(address) == _SHARED

    def add(self, seen: Iterable[tuple[str, str | None, bool]]) -> set[str]:
        """One batch's decisions; returns the addresses that became shared."""
        shared = set()
        for principal, address, throttled in seen:
            if not address:
                continue
            owner = self.owner.pop(address, None)
            if owner is not None and owner not in (principal, _SHARED):
                shared.add(address)
                owner = _SHARED
            self.owner[address] = principal if owner is None else owner  # now the newest
            if throttled:
                mine = [a for a in self.recent.get(principal, []) if a != address] + [address]
                self.recent[principal] = mine[-self.per_principal :]
        if len(self.owner) > self.max_addresses:
            excess = len(self.owner) - self.max_addresses
            # the least recently seen, never one pidquota holds a control on, and a shared one
            # last: forgotten, it would pass for the next principal's own
            free = [a for a in self.owner if a not in self.held]
            spare = [a for a in free if self.owner[a] != _SHARED] + [
                a for a in free if self.owner[a] == _SHARED
            ]
            for address in spare[:excess]:
                del self.owner[address]
        return shared

    def exclusive(self, principal: str) -> tuple[str, ...]:
        """The principal's recent throttled addresses that no other principal uses."""
        return tuple(a for a in self.recent.get(principal, []) if self.owner.get(a) == principal)
