"""Joining children's stored lists without decoding them (xruntime/payload/list_join.py):
the stored result must read back as exactly the text one job would have written."""

import json
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xruntime.payload import form as payload
from xruntime.payload.form import MAGIC, pack, unpack
from xruntime.payload.list_join import join_lists, without_list


def dump(data):
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def stored(text, form):
    """A payload in the stored form asked for (``pack`` chooses by size; the others
    force one, so that small data still exercises every form)."""
    if form == "plain":
        return text.encode("utf-8")
    if form == "zlib":
        return zlib.compress(text.encode("utf-8"), 1)
    if form == "compact":
        return payload._pack_compact(text) or pack(text)
    return pack(text)


def kind(blob):
    return "compact" if blob.startswith(MAGIC) else "zlib" if blob[:1] == b"x" else "plain"


def text_join(outer, field, blobs):
    """The slow path: decode everything, concatenate, encode again."""
    data = json.loads(outer)
    data[field] = [item for blob in blobs for item in json.loads(unpack(blob)).get(field, [])]
    return dump(data)


def check_join(outer, field, blobs):
    joined = join_lists(outer, field, blobs)
    expected = text_join(outer, field, blobs)
    assert unpack(joined) == expected
    assert kind(joined) == kind(pack(expected))
    return joined


def matrix_part(first_row, rows, columns=40):
    return {
        "rows": [
            {
                "distances": [(r * 7919 + c * 104729) % 2_000_000 for c in range(columns)],
                "travelTimes": [(r * 31 + c * 17) % 200_000 for c in range(columns)],
            }
            for r in range(first_row, first_row + rows)
        ],
        "summary": {"numberOfRowsComputed": rows, "perRow": list(range(first_row, first_row + 40))},
    }


OUTER = dump({"rows": [], "summary": {"numberOfRowsComputed": 30}})


@pytest.mark.parametrize(
    "forms",
    [
        ("compact", "compact"),
        ("plain", "plain"),
        ("zlib", "zlib"),
        ("compact", "plain"),
        ("zlib", "compact", "plain"),
    ],
)
def test_join_equals_the_text_level_join_whatever_the_forms(forms):
    blobs = [stored(dump(matrix_part(10 * i, 10)), form) for i, form in enumerate(forms)]
    assert [kind(blob) for blob in blobs] == list(forms)
    joined = check_join(OUTER, "rows", blobs)
    assert kind(joined) == "compact"


def test_compact_parts_are_joined_without_decoding_them(monkeypatch):
    blobs = [pack(dump(matrix_part(0, 20))), pack(dump(matrix_part(20, 20)))]
    assert all(kind(blob) == "compact" for blob in blobs)
    expected = text_join(OUTER, "rows", blobs)

    def slow_path(blob):
        raise AssertionError("a compact part was decoded")

    monkeypatch.setattr(payload, "_unpack_compact", slow_path)
    joined = join_lists(OUTER, "rows", blobs)
    monkeypatch.undo()
    assert unpack(joined) == expected


def test_pieces_compressed_apart_read_back_as_one_stream(monkeypatch):
    monkeypatch.setattr(payload, "PIECE_BYTES", 100)  # pieces end inside arrays
    blobs = [pack(dump(matrix_part(0, 20))), stored(dump(matrix_part(20, 5)), "plain")]
    check_join(OUTER, "rows", blobs)


def test_parts_with_the_list_absent_or_empty_add_nothing():
    blobs = [
        stored(dump({"summary": {"x": 1}}), "plain"),
        stored(dump(matrix_part(0, 10)), "compact"),
        stored(dump({"rows": [], "summary": {"perRow": list(range(100))}}), "compact"),
        stored(dump({"rows": []}), "zlib"),
        stored(dump(matrix_part(10, 10)), "compact"),
    ]
    check_join(OUTER, "rows", blobs)
    assert unpack(join_lists(OUTER, "rows", blobs[:1] + blobs[3:4])) == OUTER
    assert unpack(join_lists(OUTER, "rows", [])) == OUTER


TRICKY = [
    {
        "name": "[1,2]",
        "q": 'say "]" and \\"[',
        "é€😀": "ü]{",
        "rows": [1, 2],
        "values": list(range(1000, 1100)),
        "\\": "\\",
    },
    "rows",
    "]",
    '"rows":[',
    {"nested": {"rows": list(range(50))}},
    [[3.5] * 40, []],
]


@pytest.mark.parametrize("form", ["compact", "plain", "zlib"])
def test_items_with_brackets_quotes_escapes_and_non_ascii(form):
    parts = [
        {"name": "rows", '"rows"': "[", "rows": TRICKY, "after": list(range(60))},
        {"ü": ["rows"], "rows": TRICKY[::-1] + [list(range(-40, 40))]},
    ]
    blobs = [stored(dump(part), form) for part in parts]
    if form == "compact":
        assert all(kind(blob) == "compact" for blob in blobs)
    outer = dump({"é": '"rows":[]', "rows": [], "rows2": []})
    check_join(outer, "rows", blobs)


def test_arrays_outside_the_list_are_dropped_from_parts_and_kept_in_outer():
    outer = dump(
        {
            "rows": [],
            "summary": {"histogram": list(range(5000, 5100)), "means": [i / 7 for i in range(50)]},
        }
    )
    blobs = [pack(dump(matrix_part(0, 10))), pack(dump(matrix_part(10, 10)))]
    joined = check_join(outer, "rows", blobs)
    assert "perRow" not in unpack(joined)


@pytest.mark.parametrize(
    "outer",
    [
        '{"summary":{}}',
        '{"rows":[1]}',
        '{"x":{"rows":[]}}',
        '{"x":"\\"rows\\":[]"}',
        '[{"rows":[]}]',
        '{"rows":{}}',
    ],
)
def test_outer_without_the_empty_member_is_refused(outer):
    with pytest.raises(ValueError):
        join_lists(outer, "rows", [pack(dump(matrix_part(0, 2)))])


def test_a_part_whose_member_is_not_a_list_is_refused():
    with pytest.raises(ValueError):
        join_lists(OUTER, "rows", [pack(dump({"rows": {"a": 1}}))])


@pytest.mark.parametrize(
    "lists",
    [
        [list(range(100)), list(range(2**40, 2**40 + 50))],  # int32 then int64
        [list(range(-50, 50)), [], list(range(100, 140))],
        [[i / 3 for i in range(40)], [i / 7 for i in range(60)]],
        [list(range(100)), [i / 3 for i in range(40)]],  # kinds that cannot share
        [list(range(100)), [1, 2, 3]],  # one packed, one text
        [list(range(100)), ["a", "b"]],
    ],
)
def test_lists_that_are_each_one_packed_array(lists):
    blobs = [stored(dump({"ids": ids, "n": len(ids)}), "compact") for ids in lists]
    outer = dump({"n": 0, "ids": [], "more": list(range(100))})
    check_join(outer, "ids", blobs)
    for blob, ids in zip(blobs, lists, strict=True):
        assert without_list(blob, "ids") == dump({"ids": [], "n": len(ids)})


def test_small_results_keep_the_plain_form():
    blobs = [stored(dump({"rows": list(range(40))}), "compact")]
    joined = check_join('{"rows":[]}', "rows", blobs)
    assert kind(joined) == "plain"


@pytest.mark.parametrize("form", ["compact", "plain", "zlib"])
def test_without_list_empties_only_the_list(form):
    part = matrix_part(0, 10)
    part["before"] = list(range(70))
    text = dump({"head": [i / 9 for i in range(40)], **part})
    blob = stored(text, form)
    data = json.loads(text)
    data["rows"] = []
    assert without_list(blob, "rows") == dump(data)
    assert without_list(blob, "absent") == text


# ------------------------------------------------------------------- random objects


def number_lists():
    return st.one_of(
        st.lists(st.integers(-(2**31), 2**31 - 1), min_size=0, max_size=70),
        st.lists(st.integers(0, 9), min_size=30, max_size=70),
        st.lists(st.integers(-(2**70), 2**70), max_size=50),
        st.lists(st.floats(), max_size=50),
        st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=32, max_size=50),
    )


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=6),
    st.sampled_from(["[", "]", '"rows":[', "\\", "é€", '{"a":[1]}']),
)
values = st.recursive(
    st.one_of(scalars, number_lists()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)
keys = st.one_of(st.text(max_size=5), st.sampled_from(["rows", "Rows", 'rows"', "é"]))


@st.composite
def parts(draw):
    data = draw(st.dictionaries(keys, values, max_size=3))
    choice = draw(st.integers(0, 3))
    if choice == 1:
        data["rows"] = draw(st.lists(values, max_size=4))
    elif choice == 2:
        data["rows"] = draw(number_lists())
    elif choice == 3:
        data.pop("rows", None)
    if choice in (1, 2) and draw(st.booleans()):
        data = {"rows": data.pop("rows"), **data}  # the list first
    return dump(data), draw(st.sampled_from(["pack", "plain", "zlib", "compact"]))


@settings(max_examples=150, deadline=None)
@given(
    outer=st.dictionaries(keys, values, max_size=3),
    first=st.booleans(),
    texts=st.lists(parts(), max_size=4),
)
def test_join_equals_the_text_level_join_for_random_objects(outer, first, texts):
    outer.pop("rows", None)
    outer = {"rows": [], **outer} if first else {**outer, "rows": []}
    texts = [
        (text, form) for text, form in texts if isinstance(json.loads(text).get("rows", []), list)
    ]
    blobs = [stored(text, form) for text, form in texts]
    check_join(dump(outer), "rows", blobs)
    for (text, _), blob in zip(texts, blobs, strict=True):
        data = json.loads(text)
        if "rows" in data:
            data["rows"] = []
        assert without_list(blob, "rows") == dump(data)


def test_large_children_lists_are_copied_as_their_compressed_pieces(monkeypatch):
    """A child's rows holding all its arrays, over a piece: its compressed pieces go into
    the parent's result as they are (nothing of them decompressed), and the result reads
    back exactly as the slow path's."""
    parts = [matrix_part(0, 160, 2000), matrix_part(160, 150, 2000)]
    for part in parts:
        del part["summary"]["perRow"]  # every array in the rows
    blobs = [pack(dump(part)) for part in parts]
    assert all(kind(blob) == "compact" and len(payload.read_table(blob)[0]) > 2 for blob in blobs)
    outer = dump({"rows": [], "summary": {"numberOfRowsComputed": 310}})
    expected = text_join(outer, "rows", blobs)
    read = []
    monkeypatch.setattr(payload, "read_compact", lambda blob: read.append(blob) or 1 / 0)
    joined = join_lists(outer, "rows", blobs)
    summaries = [without_list(blob, "rows") for blob in blobs]
    assert read == []  # the fast path, for both
    monkeypatch.undo()
    assert unpack(joined) == expected and kind(joined) == "compact"
    assert summaries == [dump(dict(part, rows=[])) for part in parts]
    copied = {bytes(piece) for blob in blobs for piece, _, _ in payload.read_table(blob)[0][1:]}
    assert copied <= {bytes(piece) for piece, _, _ in payload.read_table(joined)[0]}


@pytest.mark.parametrize("form", ["plain", "zlib", "compact"])
@pytest.mark.parametrize(
    "data", [{"text": "x" * 50_000}, {"matrix": list(range(20_000)), "n": 1}, {"text": "é" * 3000}]
)
def test_unpack_within_max_bytes_or_too_large(form, data):
    """A batch weighs a result against what its answer may still hold: a text within
    the bound reads back whole, a longer one is TooLarge, at any byte past the bound."""
    text = dump(data)
    size = len(text.encode("utf-8"))
    blob = stored(text, form)
    assert unpack(blob, size) == text
    with pytest.raises(payload.TooLarge):
        unpack(blob, size - 1)
    with pytest.raises(payload.TooLarge):
        unpack(blob, 100)


def _matrix_text(values) -> str:
    return json.dumps(
        {"rows": [{"distances": values[i : i + 1000]} for i in range(0, len(values), 1000)]},
        separators=(",", ":"),
    )


def test_arrays_that_do_not_compress_are_stored_not_deflated_and_read_back():
    """Random int32 cells shrink by ~13 % at level 1 (the compression was most of a
    matrix job's time after the arithmetic): they are kept as deflate's stored blocks,
    taking their own bytes; regular ones are still compressed. Both read back exactly."""
    import random

    rng = random.Random(7)
    noisy = [rng.randrange(-(2**31), 2**31) for _ in range(200_000)]
    regular = [i % 50 for i in range(200_000)]
    for values, compressed in ((noisy, False), (regular, True)):
        text = _matrix_text(values)
        blob = pack(text)
        assert blob.startswith(MAGIC)
        assert unpack(blob) == text
        assert zlib.decompress(blob[payload.read_table(blob)[1] :])  # still one zlib stream
        if compressed:
            assert len(blob) < len(values) * 4 // 2
        else:
            assert len(values) * 4 <= len(blob) < len(values) * 4 * 1.01


def test_a_joined_list_of_incompressible_parts_reads_back():
    import random

    rng = random.Random(8)
    parts = [pack(_matrix_text([rng.randrange(2**31) for _ in range(300_000)])) for _ in range(3)]
    outer = '{"rows":[],"n":3}'
    joined = join_lists(outer, "rows", parts)
    expected = json.loads(outer)
    expected["rows"] = [row for part in parts for row in json.loads(unpack(part))["rows"]]
    assert json.loads(unpack(joined)) == expected


def test_large_children_lists_given_their_origins_are_referred_to_not_copied():
    """Given where each child's stored result is (its ``origin``: a child's result files,
    in a worker), a join refers to its compressed pieces there (``form.Ref``, one span
    per child) instead of copying them: its own bytes and the spans end to end are the
    very bytes the copying join writes.  Parts may be mapped files (memoryviews)."""
    parts = [matrix_part(0, 160, 2000), matrix_part(160, 150, 2000)]
    for part in parts:
        del part["summary"]["perRow"]  # every array in the rows
    blobs = [pack(dump(part)) for part in parts]
    outer = dump({"rows": [], "summary": {"numberOfRowsComputed": 310}})
    copied = join_lists(outer, "rows", blobs)
    origins = ["first child", "second child"]
    composite = join_lists(outer, "rows", [memoryview(b) for b in blobs], origins)
    assert isinstance(composite, payload.Composite)
    refs = [s for s in composite.segments if isinstance(s, payload.Ref)]
    assert [ref.origin for ref in refs] == origins
    by_origin = dict(zip(origins, blobs, strict=True))
    whole = b"".join(
        by_origin[s.origin][s.offset : s.offset + s.length] if isinstance(s, payload.Ref) else s
        for s in composite.segments
    )
    assert whole == copied and len(composite) == len(copied)
    assert len(composite.own()) < 64 * 1024  # the head and the tail of the form
    assert unpack(whole) == text_join(outer, "rows", blobs)


def test_small_children_lists_given_their_origins_are_still_copied():
    blobs = [pack(dump(matrix_part(0, 3))), pack(dump(matrix_part(3, 2)))]
    outer = dump({"rows": [], "summary": {}})
    joined = join_lists(outer, "rows", blobs, ["a", "b"])
    assert isinstance(joined, bytes) and joined == join_lists(outer, "rows", blobs)


@pytest.mark.parametrize("quote", ["", "a [quoted] {text}", 'an \\"escaped\\" ] quote'])
def test_a_long_member_ends_where_the_token_scan_ends_it(monkeypatch, quote):
    """A long list's end is found in NumPy's passes (list_join._closing), never
    elsewhere than one token after another finds it: brackets in strings and nested
    ones are not its end; a text with a backslash is scanned token by token."""
    from xruntime.payload import list_join

    rows = [{"d": [i, [i, {"q": quote}]], "k": f"{quote}{i}"} for i in range(2000)]
    text = dump({"rows": rows, "after": {"x": [1, quote]}, "n": 2})
    fast = list_join.member_span(text, "rows"), list_join.member_span(text, "after", opening="{")
    monkeypatch.setattr(list_join, "_SCANNED_BELOW", len(text) + 1)
    assert fast == (
        list_join.member_span(text, "rows"),
        list_join.member_span(text, "after", opening="{"),
    )
    start, end = fast[0]
    assert json.loads(text[start:end]) == rows


@pytest.mark.parametrize(
    "data",
    [
        {"locations": [{"longitude": 6.5 + i / 7, "latitude": 50 - i / 9} for i in range(400)]},
        {"text": "[" + "1," * 40 + "1]", "pad": "x" * 5000},  # numbers in a string only
        {"ids": list(range(1000, 1400)), "pad": "x" * 5000},
    ],
)
def test_a_text_without_a_long_array_of_numbers_is_not_scanned_and_packs_as_before(
    monkeypatch, data
):
    text = dump(data)
    before = pack(text)
    monkeypatch.setattr(payload, "_NUMBERS", payload.re.compile(r""))  # (matches any text)
    assert pack(text) == before and unpack(before) == text
