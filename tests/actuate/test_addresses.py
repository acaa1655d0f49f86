"""actuate/addresses.py, and the address-based mechanism in the actuator: an IP's connection
rate is set only on an address the offender has to itself, and undone once it is shared."""

from __future__ import annotations

from test_actuator_faults import NOW, _actuator

from pidquota.actuate.addresses import AddressBook
from pidquota.actuate.controls import QuotaKey
from pidquota.actuate.mechanisms import quota_and_connections

USER = QuotaKey("user", "crash", "request_percentage")


def ip(address: str) -> QuotaKey:
    return QuotaKey("ip", address, "connection_creation_rate")


def test_the_docstrings_example():
    book = AddressBook()
    assert book.add([("User:crash", "10.0.0.5", True), ("User:steady", "10.0.0.7", False)]) == set()
    assert book.exclusive("User:crash") == ("10.0.0.5",) and book.exclusive("User:steady") == ()
    assert book.add([("User:steady", "10.0.0.5", False)]) == {"10.0.0.5"}
    assert book.exclusive("User:crash") == ()
    assert book.add([("User:crash", "10.0.0.5", True)]) == set()  # shared for good
    assert book.exclusive("User:crash") == ()


def test_a_principal_keeps_its_newest_addresses_and_the_book_is_bounded():
    book = AddressBook(per_principal=2, max_addresses=3)
    book.add([("User:a", f"10.0.0.{i}", True) for i in range(5)])
    assert book.exclusive("User:a") == ("10.0.0.3", "10.0.0.4")
    assert len(book.owner) == 3
    book.add([("User:a", None, True), ("User:a", "", True)])  # no address: nothing
    assert book.exclusive("User:a") == ("10.0.0.3", "10.0.0.4")


def test_the_offenders_own_address_gets_a_connection_rate_and_a_shared_one_is_let_go():
    act, cluster, journal, clock = _actuator(quota_and_connections(1.0, 0.5))
    rows = act({"User:crash": NOW}, {"User:crash": ("10.0.0.5",)})
    assert {(r.action, r.control) for r in rows} == {("apply", USER.name), ("apply", ip("10.0.0.5").name)}
    assert cluster.values == {USER: 1.0, ip("10.0.0.5"): 0.5}
    rows = act({"User:crash": NOW}, {"User:crash": ("10.0.0.6",)})  # a new address while acted on
    assert [(r.action, r.control) for r in rows if r.action == "apply"] == [("apply", ip("10.0.0.6").name)]
    rows = act({"User:crash": NOW}, {}, shared={"10.0.0.5"})  # another user's PID came from it
    (undo,) = [r for r in rows if r.action == "undo"]
    assert undo.control == ip("10.0.0.5").name and "shared" in undo.note
    assert cluster.values[ip("10.0.0.5")] is None and cluster.values[ip("10.0.0.6")] == 0.5
    clock.t += 3600
    act({})
    assert all(v is None for v in cluster.values.values()) and journal.records == {}


def test_without_an_address_only_the_quota_is_set():
    act, cluster, _, _ = _actuator(quota_and_connections(1.0, 0.5))
    act({"User:crash": NOW})
    assert cluster.values == {USER: 1.0}


def test_an_address_held_is_never_forgotten_and_a_restart_knows_it_again():
    book = AddressBook(max_addresses=2)
    book.own("10.0.0.5", "User:crash")  # from the journal, at a restart
    book.held = {"10.0.0.5"}
    book.add([("User:x", f"10.1.0.{i}", False) for i in range(5)])
    assert set(book.owner) == {"10.0.0.5", "10.1.0.4"}  # the bound holds, the held one kept
    assert book.add([("User:steady", "10.0.0.5", False)]) == {"10.0.0.5"} and book.shared("10.0.0.5")


def test_the_addresses_are_the_newest_not_every_one_ever_seen():
    act, cluster, _, _ = _actuator(quota_and_connections(1.0, 0.5))
    act({"User:crash": NOW}, {"User:crash": ("10.0.0.5",)})
    act({"User:crash": NOW}, {"User:crash": ("10.0.0.6",)})
    assert act.addresses["User:crash"] == ("10.0.0.6",)
    assert cluster.values[ip("10.0.0.5")] == 0.5  # still held: undone with the principal


def test_an_unshare_that_fails_is_tried_again():
    act, cluster, _, _ = _actuator(quota_and_connections(1.0, 0.5))
    act({"User:crash": NOW}, {"User:crash": ("10.0.0.5",)})
    cluster.refuse = {ip("10.0.0.5")}
    rows = act({"User:crash": NOW}, {}, shared={"10.0.0.5"})
    assert [r.action for r in rows if r.control == ip("10.0.0.5").name] == ["failed"]
    assert act.held_addresses() == {"10.0.0.5": "User:crash"}  # the runner names it shared again
    cluster.refuse = set()
    rows = act({"User:crash": NOW}, {}, shared={"10.0.0.5"})
    assert [r.action for r in rows if r.control == ip("10.0.0.5").name] == ["undo"]
    assert act.held_addresses() == {} and cluster.values[ip("10.0.0.5")] is None


def test_a_shared_address_is_forgotten_last():
    """Issue 45: forgotten, a shared address passed for the next principal's own."""
    book = AddressBook(max_addresses=3)
    book.add([("User:a", "10.0.0.1", True), ("User:b", "10.0.0.1", False)])  # shared, oldest
    book.add([("User:c", f"10.0.1.{i}", False) for i in range(4)])
    assert book.shared("10.0.0.1")
    book.add([("User:crash", "10.0.0.1", True)])
    assert book.exclusive("User:crash") == ()
