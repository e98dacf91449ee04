"""Helpers the tests share, one concept a module: imported as `tests.support.<name>`, never by bare name.

Hardware doubles (fake_node, fake_nvml, kmsg_lines), crafted events (crafted), signing (signed), waits on a
condition (waiting), live stacks (live, services, fleet, slurm_cluster), and what test modules used to share
by importing each other (detectors, replay, recovery_waits, consumer_doubles, ...)."""
