"""The analyzer's own steps in its consumer chain (`vigil.analyzer.ingest.chain` lists them with the kernel's).

    claim (the offload takes its records) -> decode -> accumulate -> hand-over (claimed records to the offload)
    -> stage -> write: [intent (the ledger) -> store] -> commit
"""
