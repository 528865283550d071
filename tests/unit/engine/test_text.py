"""UTF-8-safe detokenisation and stop strings that straddle token boundaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from outrider.engine.llama.text import IncrementalDetokenizer, StopStringFilter


@given(st.text(), st.lists(st.integers(min_value=1, max_value=7), max_size=40))
def test_split_bytes_never_show_a_broken_character(text: str, cuts: list[int]) -> None:
    data = text.encode("utf-8", errors="surrogatepass").decode("utf-8", errors="replace").encode("utf-8")
    expected = data.decode("utf-8")
    detok = IncrementalDetokenizer()
    out, i = [], 0
    for c in cuts:
        piece = detok.feed(data[i : i + c])
        assert "\ufffd" not in piece or "\ufffd" in expected
        out.append(piece)
        i += c
    out.append(detok.feed(data[i:]))
    out.append(detok.flush())
    assert "".join(out) == expected


@given(st.text(alphabet="abXY<>", max_size=60), st.lists(st.integers(min_value=1, max_value=5), max_size=30))
def test_stop_string_never_leaks_and_cuts_at_first_match(text: str, cuts: list[int]) -> None:
    stops = ["<XY>", "bab"]
    f = StopStringFilter(stops)
    shown, i = [], 0
    for c in [*cuts, len(text)]:
        shown.append(f.feed(text[i : i + c]))
        i += c
    shown.append(f.flush())
    result = "".join(shown)
    first = min((text.find(s) for s in stops if s in text), default=-1)
    if first >= 0:
        assert f.matched is not None
        assert result == text[:first]
    else:
        assert result == text
    assert not any(s in result for s in stops)


def test_stop_prefix_held_then_released() -> None:
    f = StopStringFilter(["</end>"])
    assert f.feed("hello </e") == "hello "
    assert f.feed("xtra") == "</extra"
    assert f.feed(" </en") == " "
    assert f.feed("d> tail") == ""
    assert f.matched == "</end>"
