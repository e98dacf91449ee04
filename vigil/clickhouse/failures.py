"""Which ClickHouse failures are the data's fault and which the store's.

A writer retries a failed insert while the store is down or busy, but a value the
store can never take (out of a column's range, unconvertible) fails the same way on
every retry: it must be set aside, not retried forever. Client-side serialisation
errors are always the data's; server errors are the data's for the codes below.
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

