"""The application layer: the only part of vigil that imports the components and wires them together.

    cli/          the `vigil` command (every subcommand's parsing and handlers)
    stack/        `vigil up`: the embedded broker, ClickHouse, hosted services, the control port
    demo/         `vigil demo` / `make demo`: the platform with a real and a simulated sick job
    components.py the services that can be hosted and the schemas that are migrated

Components (collector, analyzer, dashboard, recovery, timer) import the kernel (contract,
settings, kafka, clickhouse, service, errors) and never each other; `make lint` enforces it.
"""
