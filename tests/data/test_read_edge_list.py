"""The streamed SNAP reader (numba scanner over blocks of whole lines) against a pure-Python reading.

The reference below reads a whole file line by line with ``bytes.split`` and a
regular expression, checking in the order the loader promises (first bad
token anywhere, then the first line without exactly two ids, then an empty
file, then the first negative id). The fast reader must give the same ids, or
the same message naming the same line, for every block size: tiny blocks make
lines straddle block boundaries.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distgcn.data._text import line_blocks
from distgcn.data.adjacency import remap_ids
from distgcn.data.snap import read_edge_ids
from distgcn.errors import InputError

MAX_ID = 2**62
BLOCK_SIZES = [1, 2, 3, 5, 8, 13, 64, 16 << 20]


def reference(data: bytes) -> tuple[list[int], list[int]] | tuple[int | None, str]:
    """(sources, targets), or (1-based line or None, message) for a file that must be refused."""
    pairs, wrong_count, negative = [], None, None
    for number, line in enumerate(data.split(b"\n"), start=1):
        if line[:1] in (b"#", b"%"):
            continue
        tokens = line.split()
        for token in tokens:
            text = repr(token.decode("utf-8", errors="replace"))
            if not re.fullmatch(rb"[+-]?[0-9]+", token):
                return number, f"expected an integer vertex id, found {text}"
            if abs(int(token)) >= MAX_ID:
                return number, f"integer {text} is too large (limit 2**62)"
            if int(token) < 0 and negative is None:
                negative = (number, f"negative vertex id {int(token)}")
        if len(tokens) not in (0, 2) and wrong_count is None:
            wrong_count = (number, f"expected 2 vertex ids 'source target', found {len(tokens)} values")
        if len(tokens) == 2:
            pairs.append((int(tokens[0]), int(tokens[1])))
    if wrong_count:
        return wrong_count
    if not pairs:
        return None, "no edges found (expected lines 'source target')"
    if negative:
        return negative
    return [u for u, _ in pairs], [v for _, v in pairs]


def fast(path: Path, block_bytes: int) -> tuple[list[int], list[int]] | tuple[int | None, str]:
    """The reader's answer in the reference's shape."""
    try:
        src, dst = read_edge_ids(path, block_bytes=block_bytes)
    except InputError as e:
        where = f"{path}:{e.line}: " if e.line is not None else f"{path}: "
        assert str(e).startswith(where), str(e)
        return e.line, str(e)[len(where):]
    assert src.dtype == np.int64 and dst.dtype == np.int64
    return src.tolist(), dst.tolist()


def assert_reads_like_reference(tmp_path: Path, data: bytes) -> None:
    expected = reference(data)
    plain = tmp_path / "g.txt"
    plain.write_bytes(data)
    packed = tmp_path / "g.txt.gz"
    packed.write_bytes(gzip.compress(data))
    for block_bytes in BLOCK_SIZES:
        for path in (plain, packed):
            assert fast(path, block_bytes) == expected, (path.name, block_bytes, data)


EDGE_CASES = {
    "comments anywhere": b"# head\n0 1\n% other style\n1 2\n#\n2 0\n# tail",
    "blank and whitespace-only lines": b"\n0 1\n\n \t \n1 2\n\n\n",
    "tabs and spaces mixed": b"0\t1\n1 \t 2\n\t2  0\t\n  3\t\t\t4",
    "trailing whitespace": b"0 1 \n1 2\t\n2 0 \x0b\x0c\n",
    "crlf": b"# c\r\n0 1\r\n1 2\r\n\r\n",
    "no final newline": b"5 6\n6 7",
    "ids beyond 2**31 and the largest allowed": b"3000000000 1\n1 4611686018427387903\n+7 -0\n",
    "id of 2**62": b"0 1\n1 4611686018427387904\n",
    "leading zeros beyond 18 digits": b"0000000000000000000000007 -00000000000000000000000000000\n",
    "19 digits below 2**62, 19 digits above": b"1000000000000000000 1\n9999999999999999999 2\n",
    "id far beyond int64": b"0 1\n1 99999999999999999999999\n",
    "negative id": b"# c\n0 1\n1 -2\n3 -4\n",
    "float": b"0 1\n1 2.5\n",
    "words": b"0 1\na b\n",
    "minus inside a token": b"0 1\n1-2 3\n",
    "lone sign": b"0 1\n- 3\n",
    "hex and exponent": b"0 1\n0x1f 1e3\n",
    "non-ascii digit": "0 1\n\u0663 1\n".encode(),
    "nul byte": b"0 1\n1\x002 3\n",
    "comment not at line start": b"0 1\n # indented\n",
    "comment after the ids": b"0 1 # why\n",
    "third column": b"0 1\n1 2 0.5\n",
    "single id": b"0 1\n5\n",
    "wrong count before a bad token": b"0 1 2\n3 4\nx y\n",
    "negative before a wrong count": b"-1 1\n2 3 4\n",
    "empty file": b"",
    "comments only": b"# nothing\n% here\n",
    "binary": bytes(range(256)),
}


@pytest.mark.parametrize("data", EDGE_CASES.values(), ids=EDGE_CASES.keys())
def test_edge_cases_read_like_the_reference(tmp_path, data):
    assert_reads_like_reference(tmp_path, data)


tokens = st.one_of(st.integers(-3, 40).map(str), st.integers(-(2**64), 2**64).map(str),
                   st.sampled_from(["x", "1.5", "+", "-", "+4", "٣", "\x00", "#", "%"]))
separators = st.sampled_from([" ", "\t", "  ", " \t", "\r"])
lines = st.one_of(
    st.lists(st.integers(0, 10**12).map(str), min_size=2, max_size=2).flatmap(lambda t: separators.map(
        lambda sep: sep.join(t))),  # mostly good lines, so that most files parse
    st.lists(tokens, max_size=4).flatmap(lambda t: separators.map(lambda sep: sep.join(t))),
    st.sampled_from(["# comment", "% c", "", " ", "\r"]),
)


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.lists(lines, max_size=15).map("\n".join))
def test_random_files_read_like_the_reference(tmp_path, text):
    assert_reads_like_reference(tmp_path, text.encode())


def test_the_compiled_scan_takes_its_limit_and_no_line_marker_from_its_arguments():
    """Not from constants frozen into numba's cache, which is keyed on the kernel's own file only: a value of the
    limit is refused, one below it kept, and 'no such line' is the marker passed in."""
    from distgcn.data._int_scan import comment_table
    from distgcn.data._int_scan_kernel import scan

    limit = np.int64(10**18 + 5)
    for token, bad_line in ((b"1000000000000000004", -7), (b"1000000000000000005", 1)):
        buf = np.frombuffer(b"1 2\n3 " + token + b"\n", dtype=np.uint8)
        bad_token_line = scan(buf, comment_table(b"#"), 2, np.empty(8, np.int64), -7, limit)[2]
        assert bad_token_line == bad_line, token


def test_error_names_the_line_far_into_a_file_of_many_blocks(tmp_path):
    lines = [f"{i}\t{i + 1}" for i in range(30_000)]
    lines[5] = "# a comment shifts nothing"
    lines[20_001] = "20001 x"
    path = tmp_path / "big.txt.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    with pytest.raises(InputError, match=r"big\.txt\.gz:20002: expected an integer vertex id, found 'x'"):
        read_edge_ids(path, block_bytes=4096)


def test_gzip_is_streamed_in_blocks_of_whole_lines(tmp_path):
    text = "".join(f"{i} {i * 7}\n" for i in range(20_000)).encode()
    path = tmp_path / "g.txt.gz"
    path.write_bytes(gzip.compress(text))
    blocks = [bytes(block) for block in line_blocks(path, block_bytes=1000)]
    assert b"".join(blocks) == text
    assert all(block.endswith(b"\n") for block in blocks)
    assert max(len(block) for block in blocks) <= 1000 + max(map(len, text.splitlines(keepends=True)))


def test_a_line_longer_than_a_block_is_kept_whole(tmp_path):
    path = tmp_path / "g.txt"
    path.write_bytes(b"1 2\n" + b" " * 50 + b"3 4\n5 6")
    assert [bytes(block) for block in line_blocks(path, block_bytes=8)] == [b"1 2\n", b" " * 50 + b"3 4\n", b"5 6"]


def test_truncated_gzip_names_the_file(tmp_path):
    packed = gzip.compress("".join(f"{i} {i + 1}\n" for i in range(10_000)).encode())
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(InputError, match=r"cut\.txt\.gz: not a valid gzip file"):
        read_edge_ids(path, block_bytes=1024)


@pytest.mark.parametrize("spread", [1, 2, 10**9], ids=["identity-like", "lookup table", "sparse ids"])
def test_remap_ids_gives_each_id_its_rank(spread):
    rng = np.random.default_rng(spread)
    src, dst = rng.integers(0, 1000 * spread, size=(2, 700)) if spread > 1 else rng.permutation(700).reshape(2, -1)
    src[0] = 0  # ids from 0 with gaps are not already positions
    vertex_ids, (src_at, dst_at) = remap_ids(src, dst)
    expected_ids, inverse = np.unique(np.concatenate((src, dst)), return_inverse=True)
    np.testing.assert_array_equal(vertex_ids, expected_ids)
    np.testing.assert_array_equal(np.concatenate((src_at, dst_at)), inverse)
