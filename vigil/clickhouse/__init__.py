"""ClickHouse plumbing: the client factory (chdb or server), the query Protocol, failure
classification and the migration runner. Import the modules directly (`vigil.clickhouse.client`
loads clickhouse-connect; the others do not)."""
