"""How the row blocks of a packed GEMM share out over threads: the share of the threads' time
a number of equal blocks keeps busy (a shorter last block too), the block size below one that
keeps enough of it busy, the size that gives each thread its share with a shorter last block,
and the blocks' size where the last register tile of rows is shifted inwards. Plain arithmetic
on tile counts, for the rule-based schedule (``heuristic.row_block``) and the search space."""

from __future__ import annotations


def shared(blocks: int, threads: int) -> float:
    """The share of ``threads`` threads' time that ``blocks`` equal row blocks keep busy, the
    parallel loop handing them out a round of ``threads`` at a time.

    >>> shared(16, 16), shared(18, 16), shared(5, 2)
    (1.0, 0.5625, 0.8333333333333334)
    """
    return blocks / (-(-blocks // threads) * threads)


def busy(tiles: int, block: int, threads: int) -> float:
    """The share of ``threads`` threads' time that row blocks of ``block`` register tiles keep
    busy over ``tiles`` tiles, the last block shorter where ``block`` does not divide them
    (``shared`` where it does): the thread with the most blocks takes a round's block each
    round (or all the tiles, on one thread).

    >>> busy(125, 5, 16), busy(125, 8, 16), busy(128, 8, 16) == shared(16, 16)
    (0.78125, 0.9765625, True)
    >>> busy(166, 32, 2), busy(166, 28, 2), busy(166, 32, 1)
    (0.8645833333333334, 0.9880952380952381, 1.0)
    """
    blocks = -(-tiles // block)
    return tiles / (threads * min(-(-blocks // threads) * block, tiles))


def partial_block(tiles: int, threads: int, per_thread: int, most: int) -> int | None:
    """Register tiles per row block that give each of ``threads`` threads ``per_thread`` blocks
    a round, in as few rounds as blocks of at most ``most`` tiles allow, only the last block
    shorter (``ceil(tiles / (threads x per_thread x rounds))``, as BLAS libraries divide the
    rows among threads in whole register tiles), or None where that divides ``tiles`` (a whole
    block, which ``heuristic.row_block`` finds itself).

    >>> partial_block(125, 16, 1, 24), partial_block(128, 16, 1, 24), partial_block(125, 2, 1, 24)
    (8, None, 21)
    >>> partial_block(166, 2, 1, 32)  # 6 blocks in 3 rounds, the last of 26 tiles
    28
    """
    rounds = -(-tiles // (threads * per_thread * max(1, most)))
    block = -(-tiles // (threads * per_thread * rounds))
    return block if tiles % block else None


def balanced_down(tiles: int, block: int, threads: int, least: float) -> int | None:
    """The largest divisor of ``tiles`` below ``block`` and at least half of it whose blocks
    keep at least ``least`` of ``threads`` threads' time busy (``shared``), or None: more,
    smaller row blocks where ``block``'s do not share out (200 tiles of 5 rows on 2 threads:
    8 blocks of 25, not 5 of 40, three of them on one thread).

    >>> balanced_down(200, 40, 2, 0.9), balanced_down(200, 40, 16, 0.9), balanced_down(7, 7, 2, 0.9)
    (25, None, None)
    """
    return next((d for d in range(block - 1, -(-block // 2) - 1, -1)
                 if tiles % d == 0 and shared(tiles // d, threads) >= least), None)


def shifted_row_block(extent: int, rows: int, block: int) -> int:
    """Register tiles per row block where the last tile of ``rows`` rows over ``extent`` is
    shifted inwards (``SHIFT_ROWS``): the row blocks of ``block`` whole tiles (``extent //
    rows`` of them) keep their number, the extra tile spread over them (one more tile a block
    at most, where ``block`` divides the whole tiles), or where no block size gives that
    number, ``block``: the extra tile a block of its own.

    >>> shifted_row_block(256, 6, 21), shifted_row_block(256, 6, 42), shifted_row_block(5, 6, 1)
    (22, 43, 1)
    >>> shifted_row_block(70, 6, 1)  # 11 whole tiles, 12 tiles: no block size gives 11 blocks
    1
    >>> shifted_row_block(140, 6, 16)  # 23 whole tiles in blocks of 16 and 7: 2 blocks of 12
    12
    """
    blocks = max(1, -(-(extent // rows) // max(1, block)))  # (a shorter last block counted)
    tiles = -(-extent // rows)
    spread = -(-tiles // blocks)
    return spread if -(-tiles // spread) == blocks else max(1, block)
