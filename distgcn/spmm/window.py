"""When a halo window pays: the one rule the exchanger and the memory model share (no torch needed)."""

from __future__ import annotations


def windowed(window: int | None, halo_rows: int, rows_sent: int, largest_recv: int, largest_send: int) -> bool:
    """Whether ``window`` slots of the largest message each way hold fewer rows than the whole halo and send
    buffers. If not (the window covers every round, or the messages are that uneven), the whole halo is used."""
    return window is not None and window * (largest_recv + largest_send) < halo_rows + rows_sent


def message_buffer_rows(window: int | None, halo_rows: int, rows_sent: int, largest_recv: int,
                        largest_send: int) -> int:
    """Rows of the receive and send buffers of one exchanged width: K slots each way, or the whole halo."""
    if windowed(window, halo_rows, rows_sent, largest_recv, largest_send):
        return window * (largest_recv + largest_send)
    return halo_rows + rows_sent


def streams(window: int | None, parts: int) -> bool:
    """Whether a job of ``parts`` ranks streams its halo: the window is below the P - 1 rounds a rank may have.
    The same on every rank, unlike :func:`windowed`, so collective choices (GAT fetching halo rows again in the
    backward pass) follow it."""
    return window is not None and window < parts - 1
