"""A fault-injecting cluster simulator: realistic telemetry of a whole job, repeatable by seed.

    layout.py   hosts, ranks and the 3D-parallel coordinates
    faults.py   `--fault KIND:host=NAME,...` specs and the alert each should raise
    model.py    pure generators: one training step -> the events it produces
    runner.py   streams the events through the real broker, paced on simulated time
"""
