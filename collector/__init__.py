"""The vigil node agent: launches or watches training processes and ships their telemetry.

`vigil run -- CMD` starts the training command (usually torchrun), captures its output,
forwards signals and reports how it ended; `vigil collector` is the same agent without
a child (DaemonSet mode). Both send heartbeats, NIC counters, classified log lines,
Flight Recorder traces and the step timer's spool files to Kafka, through a durable
local outbox so a broker outage or an agent restart loses nothing.

Modules, one concept each:

    settings     CollectorSettings (env VIGIL_..., config file [collector])
    rules        log classification rules: built-ins + user rules, regex -> category
    logstream    one output stream -> LogLine events (rank prefixes, tracebacks, floods)
    flood        rate limiting of repeated log events, summarised as repeats=N
    summary      the error summary of a failed run (torchrun root cause, last traceback)
    segments     numbered append-only segment files (the outbox, the child's stdout/stderr)
    nic          RDMA (sysfs) and Ethernet (procfs) byte counters -> rates
    gpu          NVML readings, when NVML is present
    procs        the training process tree (psutil)
    heartbeat    identity (IP, pod, node) and the periodic Heartbeat
    flightrec    PyTorch Flight Recorder dumps -> CollectiveTrace
    tailer       JSON-lines / log file tailing with durable offsets (rotation-safe)
    outbox       the durable local disk spool of the agent's own events
    sink         where events go: Kafka, or memory (tests)
    shipper      outbox + timer files -> sink; offsets committed after delivery
    spoolguard   which spool lines the agent accepts: the training side's kinds, its own job and host
    agent        wires the sources, the outbox and the shipper into threads
    exits        how the training processes ended (attested exits)
    classifying  the child's output streams classified into LogLine events
    control/     the node's recovery actuator (`vigil run`'s commands, launches, warm starts,
                 diagnostics, snapshot replication): imports the telemetry side, never imported by it

Errors (the agent never crashes on bad input; it counts and logs it instead):

    VigilError (vigil.errors)
    ├── SettingsError (also ValueError)  a bad setting or rule (collector.settings, collector.rules)
    ├── DeliveryError                    the sink did not accept events (caught by the shipper)
    └── Unreachable                      Kafka not reachable (caught by the shipper)
    ValueError                           bad user input (a malformed rule, a bad CLI value)
"""

