"""The compiled kernel of :mod:`distgcn.data._int_scan`, in a module of its own: numba is imported on first use.

Module-level functions: numba's on-disk cache finds them again in the next
process (a kernel defined inside a function, capturing other kernels, was
compiled anew in every process, ~1.5-3 s). The constants of other modules
(``NONE``, ``MAX_ID``) come in as arguments: numba freezes a global's value
into the compiled code, and its cache is keyed on this file alone, so a
changed constant elsewhere would have been ignored until the cache was
cleared.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True)
def is_space(c):
    return c == 32 or (9 <= c <= 13)  # ' ', \t \n \v \f \r: what bytes.split() splits at


@numba.njit(nogil=True, cache=True)
def checked_value(buf, i, limit):
    """(value, usable) of the digits from ``i`` to the next space (usable: below ``limit``), with overflow checked
    at each digit."""
    before_last_digit = limit // 10 + 1  # below this, ``v * 10 + 9`` cannot overflow int64
    value = np.int64(0)
    usable = True
    while not is_space(buf[i]):
        if 48 <= buf[i] <= 57 and value < before_last_digit:
            value = value * 10 + (buf[i] - 48)
            usable = usable and value < limit
        else:
            usable = False
        i += 1
    return value, usable


@numba.njit(nogil=True, cache=True)
def scan(buf, comment, per_line, values, none, limit):
    """The loops test no bounds: ``buf`` ends with a newline, which stops each of them. ``none``: the line index
    that means no such line; ``limit``: the magnitude (int64, at least 10^18: tokens of up to 18 digits are not
    compared with it) a value must stay below."""
    n = buf.size
    count = 0
    line = 0
    i = 0
    bad_line = none
    bad_count = 0
    negative = none
    negative_line = none
    while i < n:
        if comment[buf[i]]:
            while buf[i] != 10:
                i += 1
            i += 1
            line += 1
            continue
        on_line = 0
        while buf[i] != 10:
            if is_space(buf[i]):
                i += 1
                continue
            minus = buf[i] == 45
            if buf[i] == 43 or buf[i] == 45:  # '+' or '-'
                i += 1
            start = i
            value = np.int64(0)
            while 0 <= np.int64(buf[i]) - 48 <= 9:  # up to 18 digits cannot overflow; longer are checked below
                value = value * 10 + (np.int64(buf[i]) - 48)
                i += 1
            usable = i > start and is_space(buf[i])
            if usable and i - start > 18:
                value, usable = checked_value(buf, start, limit)
            if not usable:
                return count, line + 1, line, bad_line, bad_count, negative, negative_line
            if minus and value != 0:
                if negative == none:
                    negative = count
                    negative_line = line
                value = -value
            values[count] = value
            count += 1
            on_line += 1
        if per_line and on_line != 0 and on_line != per_line and bad_line == none:
            bad_line = line
            bad_count = on_line
        i += 1
        line += 1
    return count, line, none, bad_line, bad_count, negative, negative_line
