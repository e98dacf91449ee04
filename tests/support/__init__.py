"""Helpers the tests share, one concept a module, imported as `tests.support.<name>` (never by bare name).

- waiting on a condition: waiting; signing and attesting: signed; test databases: databases
- hardware doubles: fake_node (sysfs tree), fake_nvml (pynvml), kmsg_lines (/dev/kmsg records)
- events and records: crafted, longjob, wire_records, gone_lag, poison (the corpus), poison_feed
- live stacks: live (controller and agents, and its `live` fixture), notifier (the notifier's fixtures),
  recovery_waits, snapshot_job, services (analyzer, chaos job), fleet (the engine against simulated agents), slurm_cluster, agent_harness (`vigil run` agents), receiver
  (a webhook), dashhttp (the dashboard over HTTP), forgery
- the analyzer judging: detectors, live_cursor, replay; the consumer's doubles: commit_doubles, consumer_doubles,
  recording (a recording next step)

Helpers only one folder uses stay beside its tests (tests/recovery/storage_fakes.py, ...), imported by their
package path too. tests/backbone/test_tests_package.py keeps it so."""
