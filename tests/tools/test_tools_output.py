"""UTF-8 safety and truncation of tool output."""

from __future__ import annotations

from services.tools.output import truncate


def test_short_text_is_untouched() -> None:
    assert truncate("héllo 😀", 20) == ("héllo 😀", False)
    assert truncate("x" * 20, 20) == ("x" * 20, False)


def test_cut_on_characters_never_bytes() -> None:
    text = "😀" * 30  # 4 UTF-8 bytes each
    out, truncated = truncate(text, 10)
    assert truncated
    assert out.startswith("😀" * 10 + "\n…[truncated: 30 characters total, showing the first 10]")
    assert out.encode("utf-8").decode("utf-8") == out


def test_a_cut_is_made_after_lone_surrogates_are_replaced() -> None:
    out, truncated = truncate("\udcff" * 50, 10)
    assert truncated
    out.encode("utf-8")  # must not raise
    assert out.startswith("\ufffd" * 10)


def test_cut_keeps_combining_marks_and_emoji_sequences_together() -> None:
    # "e" + COMBINING ACUTE: cutting between them would leave a bare "e".
    out, _ = truncate("abcde\u0301fgh", 5)
    assert out.startswith("abcd\n")
    # family emoji joined with ZWJ: back off to before the sequence.
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    out, _ = truncate("ab" + family + "cd", 4)
    assert out.startswith("ab\n…[truncated")
    # skin-tone modifier stays with its emoji
    out, _ = truncate("ab\U0001f44d\U0001f3fdcd", 3)
    assert out.startswith("ab\n")
