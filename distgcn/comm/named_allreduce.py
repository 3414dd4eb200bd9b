"""Cross-rank reduction of records of named fields, each field summed or maximized, in one allreduce per op.

Metrics are reduced by name, so a reader sees which value is summed over
ranks and which is the slowest rank's, while the values still travel as one
flat array per op: the records are packed record by record, each record's
fields in its own order, and every rank packs alike because every rank builds
the same records (same fields, same order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from distgcn.comm.transport import Transport

SUM = "sum"
MAX = "max"


def allreduce_named(transport: Transport, records: Sequence[Mapping[str, float]],
                    ops: Mapping[str, str]) -> list[dict[str, float]]:
    """Each of ``records`` reduced over all ranks field by field: ``ops[name]`` is SUM or MAX (collective).

    One allreduce per op that the fields use, in the order the ops first appear among the fields.
    """
    reduced: list[dict[str, float]] = [dict(record) for record in records]  # the fields in order; all replaced
    for op in dict.fromkeys(ops[name] for record in records for name in record):
        slots = [(i, name) for i, record in enumerate(records) for name in record if ops[name] == op]
        values = transport.allreduce([records[i][name] for i, name in slots], op=op)
        for (i, name), value in zip(slots, values):
            reduced[i][name] = value
    return reduced
