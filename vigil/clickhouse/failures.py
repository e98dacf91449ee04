"""Which ClickHouse failures are the data's fault, which the store's for now, and which neither (bugs).

A writer retries a failed insert while the store is down or busy, but a value the
store can never take (out of a column's range, unconvertible) fails the same way on
every retry: it must be set aside, not retried forever. Client-side serialisation
errors are always the data's; server errors are the data's for the codes below.

One code is both: 252 (TOO_MANY_PARTS) is the store's overload ("too many parts")
and also the data's ("too many partitions for a single INSERT block": a batch of
events on more than 100 days). `splits` says a smaller insert may succeed, so a
writer bisects on it like on a data error; when a single event still fails with it,
it is the overload, and `is_transient` says to retry.
"""

from __future__ import annotations

import re

from clickhouse_connect.driver.exceptions import DatabaseError, DataError, OperationalError

# Server error codes that a given row reproduces on every attempt.
DATA_ERROR_CODES = frozenset({
    6,    # CANNOT_PARSE_TEXT
    27,   # CANNOT_PARSE_INPUT_ASSERTION_FAILED
    38,   # CANNOT_PARSE_DATE
    41,   # CANNOT_PARSE_DATETIME
    53,   # TYPE_MISMATCH
    69,   # ARGUMENT_OUT_OF_BOUND
    70,   # CANNOT_CONVERT_TYPE
    72,   # CANNOT_PARSE_NUMBER
    117,  # INCORRECT_DATA
    131,  # TOO_LARGE_STRING_SIZE
    321,  # VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
})

_CODE = re.compile(r"\bCode: (\d+)\b")


def is_data_error(exc: BaseException) -> bool:
    """True when retrying the same rows cannot succeed."""
    if isinstance(exc, OperationalError):
        return False
    if isinstance(exc, DataError | ValueError | TypeError | AttributeError | OverflowError):
        return True
    if isinstance(exc, DatabaseError):
        m = _CODE.search(str(exc))
        return m is not None and int(m.group(1)) in DATA_ERROR_CODES
    return False



# Server error codes that say the store is unavailable or busy right now, not that the query is wrong.
TRANSIENT_CODES = frozenset({
    159,  # TIMEOUT_EXCEEDED
    202,  # TOO_MANY_SIMULTANEOUS_QUERIES
    209,  # SOCKET_TIMEOUT
    210,  # NETWORK_ERROR
    236,  # ABORTED
    241,  # MEMORY_LIMIT_EXCEEDED
    242,  # TABLE_IS_READ_ONLY
    243,  # NOT_ENOUGH_SPACE
    252,  # TOO_MANY_PARTS
    394,  # QUERY_WAS_CANCELLED
    425,  # SYSTEM_ERROR
    999,  # KEEPER_EXCEPTION
})


def is_transient(exc: BaseException) -> bool:
    """True when the same statement may succeed later: the store unreachable, overloaded or out of room."""
    if isinstance(exc, OperationalError | ConnectionError | TimeoutError):
        return True
    if isinstance(exc, DatabaseError):
        m = _CODE.search(str(exc))
        return m is not None and int(m.group(1)) in TRANSIENT_CODES
    return False


# Server error codes a smaller insert of the same rows may avoid (and that are transient otherwise).
SPLIT_CODES = frozenset({
    252,  # TOO_MANY_PARTS, also raised for too many partitions in one insert block
})


def splits(exc: BaseException) -> bool:
    """True when inserting the rows in smaller parts may succeed where the whole failed."""
    if isinstance(exc, DatabaseError) and not isinstance(exc, OperationalError):
        m = _CODE.search(str(exc))
        return m is not None and int(m.group(1)) in SPLIT_CODES
    return False
