"""A client's identity (pidquota.quota.client): one joined string through Arrow and Spark,
split again for people and for the output's columns."""

import pytest

from pidquota.quota.client import COLUMNS, SEP, Client, describe, top

APP = Client("app-1", None, "10.0.0.5", "kafka-python 3.0.12", "b1")

pytestmark = pytest.mark.quick


def test_joined_and_parsed_back():
    assert APP.joined() == f"app-1{SEP}{SEP}10.0.0.5{SEP}kafka-python 3.0.12{SEP}b1"
    assert Client.parse(APP.joined()) == APP
    assert Client().joined() is None and Client.parse(None) is None and Client.parse("") is None
    assert Client.parse(SEP * 4) is None  # every field empty: nothing known


def test_a_short_or_long_joined_string_still_parses():
    assert Client.parse("app") == Client("app")
    assert Client.parse(SEP.join("abcdefg")) == Client(*"abcde")


def test_from_an_output_row_nan_and_empty_are_not_known():
    row = dict.fromkeys(COLUMNS, float("nan")) | {"client_id": "app-1", "broker": ""}
    assert Client.from_row(row) == Client("app-1")
    assert Client.from_row(dict.fromkeys(COLUMNS)) is None


def test_text_is_one_line_for_a_person():
    assert APP.text() == "client.id app-1 (kafka-python 3.0.12) at 10.0.0.5 via broker b1"
    assert Client(None, "tx-9").text() == "no client.id transactional.id tx-9"


def test_the_most_frequent_wins_and_the_others_are_counted():
    a, b = Client("a").joined(), Client("b").joined()
    assert top([a, b, a, None]) == a and top([None]) is None
    assert top([a, b]) == b  # a tie: the greatest string, the same on every path
    assert describe([a, a, b]) == "client.id a, +1 other client"
    assert describe([a, b, Client("c").joined()]).endswith("+2 other clients")
    assert describe([None]) == ""
