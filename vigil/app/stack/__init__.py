"""The embedded stack: broker + ClickHouse + hosted services in one `vigil up` process."""
