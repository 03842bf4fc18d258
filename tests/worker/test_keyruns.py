"""``KeyRuns``: run-length lineages give the same coverage as element by element."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zmqdata._wire.lineage import Coverage, Lineage, Ranges
from zmqdata._worker.keyruns import KeyRuns


@st.composite
def lineages(draw: st.DrawFn) -> list[Lineage]:
    """Lineages as pipelines make them: mostly the next keys, some gaps,
    empty ones (unbatch), some of several ranges (a batch over a gap)."""
    key, out = 0, []
    for kind in draw(st.lists(st.sampled_from("1122wge"), max_size=40)):
        key += draw(st.integers(0, 2)) if kind == "g" else 0
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
@given(lineages(), st.lists(st.integers(1, 7), min_size=1))
def test_replies_cover_what_their_elements_stand_for(items, takes) -> None:
    runs, handed = KeyRuns(), (0, 1_000)
    runs.handed(*handed)
    for lineage in items:
        runs.put(lineage)
    position, taken = 0, Ranges()
    for count in takes:
        count = min(count, len(items) - position)
        if not count:
            break
        reply, expected = Coverage(), Coverage()
        runs.take(count, reply)
        for lineage in items[position : position + count]:
            expected.add(lineage)
            taken.add_all(lineage)
        assert (reply.keys, reply.widths) == (expected.keys, expected.widths)
        position += count
    output = Ranges()
    for lineage in items:
        output.add_all(lineage)
    rest = Ranges([*handed])
    rest.remove_all(output)
    assert list(runs.dropped()) == list(rest)
