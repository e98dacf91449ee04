"""`vigil run --nodes MIN:MAX ... -- CMD`: the node agent under recovery control (see collector.control.supervisor).

The agent takes the recovery controller's commands from the `commands` topic instead of
starting CMD at once, honours the local cordon registry (`$VIGIL_HOME/cordons.json`), and
reports itself and its progress as `member` events.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


def add_options(run: argparse.ArgumentParser) -> None:
    group = run.add_argument_group("recovery control", "the job's agents take the recovery controller's commands: "
                                   "it starts CMD with the rendezvous filled in, stops, diagnoses and restarts it")
    group.add_argument("--nodes", metavar="MIN:MAX",
                       help="run under recovery control; the job accepts MIN..MAX nodes (N: exactly N)")
    group.add_argument("--node-multiple", type=int, default=1, metavar="N",
                       help="the node count must be a multiple of N (default 1)")
    group.add_argument("--spare", action="store_true", help="a spare host: joins only to replace another")
    group.add_argument("--rdzv-addr", metavar="ADDR",
                       help="address other hosts reach this host's rendezvous at (default: the agent's IP)")
    group.add_argument("--keepalive", type=float, default=10.0, metavar="S",
                       help="seconds between member keep-alives (default 10)")


def run(args: argparse.Namespace, *, agent: Any, paths: Any, argv: list[str], env: dict[str, str],
        launcher_for: Callable[[list[str], dict[str, str]], Any]) -> int:
    from vigil.app.stack.state import resolve_bootstrap
    from vigil.collector.control.commands import CommandFeed
    from vigil.collector.control.rendezvous import NodeRange
    from vigil.collector.control.supervisor import Supervisor
    from vigil.collector.control.torchrun import nproc_per_node
    from vigil.collector.control.warm import WarmPool
    from vigil.collector.control.warmdiag import WarmDiagnostics
    from vigil.collector.heartbeat import local_ip
    from vigil.collector.principal import scrub_secrets
    from vigil.collector.sink import ObservedSink
    from vigil.cordons import CordonRegistry, registry_path
    from vigil.kafka.admin import ensure_topics
    from vigil.kafka.follow import Follower
    from vigil.settings import VigilSettings
    from vigil.signing import Role
    from vigil.signing.gate import Gate
    from vigil.signing.policy import Refusals
    from vigil.signing.setup import signer, verifier

    nodes = NodeRange.parse(args.nodes, args.node_multiple)
    core = VigilSettings.load()
    s = agent.settings
    started = datetime.now(UTC)

    def feed() -> CommandFeed:
        bootstrap = resolve_bootstrap(core)
        ensure_topics(core, bootstrap, ["commands", "recovery"])
        follower = Follower(settings=core, bootstrap=bootstrap, topics=["commands"])
        gate = Gate(verifier=verifier(core.home), refusals=Refusals(reporter=f"agent:{s.host}"))
        return CommandFeed(poll_events=follower.poll, job_id=s.job_id, host=s.host, since=started,
                           done_file=paths.state_dir / "commands.json", gate=gate, emit=agent.emit)

    replicator = _replicator(s) if s.replicate_snapshots else None
    pool = WarmPool.for_command(argv, env, list(s.warm_imports), s.warm_refill_delay_s,
                                run_as=args.run_as) if s.warm_start else None
    diag = WarmDiagnostics(env=env) if s.warm_diagnostics else None

    def make_launcher(a: list[str], e: dict[str, str]) -> Any:
        launcher = launcher_for(a, e)
        launcher.warm = pool  # a generation starts in the interpreters warmed for it (collector.control.warm)
        return launcher

    key = signer(Role.AGENT, core.home, host=s.host)  # this host's own key: `vigil keys issue HOST`
    supervisor = Supervisor(agent=agent, argv=argv, env=env, nodes=nodes, make_launcher=make_launcher, feed=feed,
                            registry=CordonRegistry(registry_path(core.home)),
                            address=args.rdzv_addr or local_ip(), spare=args.spare, keepalive_s=args.keepalive,
                            replicator=replicator, nproc=nproc_per_node(argv), seal=_sealer(key),
                            warm_diag=diag)
    scrub_secrets()  # the agent's key and credentials were read: none stays in its environment
    agent.sink = ObservedSink(inner=agent.sink, observe=supervisor.progress.observe)
    agent.shipper.sink = agent.sink
    agent.start()
    if replicator is not None:
        replicator.start()
    if pool is not None:
        pool.prepare()
    if diag is not None:
        diag.prepare()
    try:
        return supervisor.run()
    finally:
        if diag is not None:
            diag.close()
        if pool is not None:
            pool.close()
        if replicator is not None:
            replicator.stop()
        agent.stop()


def _sealer(key: Any) -> Callable[[Any], Any] | None:
    """The agent's attestation of its member events (None without a key of its host: they go unattested and
    the controller refuses them)."""
    return None if key is None else key.seal


def _replicator(s: Any) -> Any:
    """Buddy replication between the agents of this machine (`LocalTransport`: hosts are directories)."""
    from vigil.collector.control.buddies import LocalTransport
    from vigil.collector.control.replicas import HostStore
    from vigil.collector.control.replication import Replicator
    from vigil.collector.settings import snapshot_memory

    def store_of(host: str) -> HostStore:
        return HostStore(snapshot_memory(s, host), keep=s.snapshot_keep, max_rank_bytes=int(s.snapshot_max_rank_mb * 2**20),
                         max_host_bytes=int(s.snapshot_max_host_mb * 2**20))

    return Replicator(store_of(s.host), LocalTransport(store_of=store_of), host=s.host, interval_s=s.replicate_interval_s)
