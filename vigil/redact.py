"""What of a secret-bearing setting may be shown: DSNs without their password.

Secrets (the ClickHouse DSN's userinfo password, Kafka extras such as ``sasl.password``,
key paths) are typed `SecretStr` in settings and unwrapped only where a client is built.
Everything that prints, logs, raises or stores a DSN for display goes through `shown_dsn`:
the password (and a token-only userinfo) becomes ``***``; the scheme, user, host, port and
path stay, so a message still says where. Pure logic.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

MASK = "***"


def shown_dsn(dsn: str) -> str:
    """`dsn` with the password of its userinfo masked; unparseable input is masked whole."""
    try:
        parts = urlsplit(dsn)
        host = parts.netloc.rpartition("@")[2]
    except ValueError:
        return MASK
    if "@" not in parts.netloc:
        return dsn
    user, sep, _password = parts.netloc.rpartition("@")[0].partition(":")
    userinfo = f"{user}:{MASK}" if sep else MASK
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{host}"))


def scrub(text: str, dsn: str) -> str:
    """`text` (e.g. a driver's error message) with the password of `dsn` masked wherever it appears."""
    try:
        password = urlsplit(dsn).password
    except ValueError:
        return text
    return text.replace(password, MASK) if password else text
