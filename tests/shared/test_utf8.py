"""Text made encodable: lone surrogates replaced, split pairs rejoined, also across pieces."""

from __future__ import annotations

import json

from shuttle.utf8 import StreamedText, ensure_utf8, json_text, storable_text, utf8_size


def test_lone_surrogates_are_replaced_and_pairs_rejoined() -> None:
    assert ensure_utf8("a\ud800b") == "a\ufffdb"
    assert ensure_utf8("\ud83d\ude00") == "😀"  # a split pair becomes the real character
    assert ensure_utf8("caf\u00e9 😀") == "caf\u00e9 😀"
    assert ensure_utf8("") == ""


def test_a_pair_cut_between_two_pieces_arrives_whole() -> None:
    text = StreamedText()
    handed = [text.piece("one \ud83d"), text.piece("\ude00 two"), text.piece(" \udce9")]
    assert handed == ["one ", "😀 two", " \ufffd"]
    assert text.rest() == ""


def test_a_first_half_left_at_the_end_is_replaced() -> None:
    text = StreamedText()
    assert text.piece("end \ud83d") == "end "
    assert text.piece("") == ""  # still held: nothing new arrived
    assert text.rest() == "\ufffd"
    assert text.rest() == ""


def test_a_first_half_followed_by_anything_else_is_replaced() -> None:
    text = StreamedText()
    assert text.piece("\ud83d") == ""
    assert text.piece("x") == "\ufffdx"


def test_json_text_writes_text_as_it_is_and_escapes_only_what_utf8_cannot_hold() -> None:
    assert (
        json_text({"a": "caf\u00e9 😀", "b": [1, 2.5, None]})
        == '{"a":"caf\u00e9 😀","b":[1,2.5,null]}'
    )
    unusual = {"path": "caf\udce9.txt", "big": 2**70}
    text = json_text(unusual)
    text.encode("utf-8")  # must not raise
    assert json.loads(text) == unusual


def test_storable_text_replaces_nul_and_lone_surrogates_and_keeps_the_rest() -> None:
    assert (
        storable_text("a\x00b \ud83d\ude00 caf\u00e9 \udce9")
        == "a\ufffdb \U0001f600 caf\u00e9 \ufffd"
    )
    plain = "nothing to change"
    assert storable_text(plain) is plain


def test_utf8_size_counts_encoded_bytes_and_never_fails() -> None:
    assert utf8_size("plain") == 5
    assert utf8_size("né😀") == len("né😀".encode())  # 1 + 2 + 4
    assert utf8_size("half \ud83d") == 8  # a lone surrogate counts, as three bytes
