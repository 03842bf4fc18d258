"""``HandedKeys``: a reply covered at once says what element by element would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zmqdata._wire.lineage import Coverage, Lineage, Ranges
from zmqdata._worker.handed import HandedKeys


@st.composite
def lineages(draw: st.DrawFn) -> list[Lineage]:
    """Lineages as pipelines make them: mostly the next key, some gaps, empty
    ones (unbatch), wider ones (batches), some of two ranges (a batch over a gap)."""
    key, out = 0, []
    for kind in draw(st.lists(st.sampled_from("1111wge"), max_size=40)):
        key += draw(st.integers(0, 2))
        if kind == "e":
            out.append(())
        elif kind == "w":
            out.append((key, key + 3))
            key += 3
        elif kind == "g":
            out.append((key, key + 1, key + 5, key + 6))
            key += 6
        else:
            out.append((key, key + 1))
            key += 1
    return out


@settings(max_examples=300, deadline=None)
@given(lineages(), st.lists(st.integers(1, 9), min_size=1))
def test_replies_cover_what_their_elements_stand_for(items, takes) -> None:
    keys, handed = HandedKeys(), (0, 1_000)
    keys.handed(*handed)
    position = 0
    for count in takes:
        reply, expected = Coverage(), Coverage()
        keys.cover(items[position : position + count], reply)
        for lineage in items[position : position + count]:
            expected.add(lineage)
        assert (reply.keys, reply.widths) == (expected.keys, expected.widths)
        position += count
    output = Ranges()
    for lineage in items:
        output.add_all(lineage)
    rest = Ranges([*handed])
    rest.remove_all(output)
    assert list(keys.dropped(buffered=items[position:])) == list(rest)


def test_a_reply_of_next_keys_is_one_run() -> None:
    keys, reply = HandedKeys(), Coverage()
    keys.handed(0, 100)
    keys.cover([(k, k + 1) for k in range(10, 60)], reply)
    assert (reply.keys, reply.widths) == ([10, 60], [50, 1])
    assert keys.dropped(buffered=[]) == (0, 10, 60, 100)
