"""`vigil run [options] -- CMD ...` (launch and watch) and `vigil collector` (watch only).

Both run the node agent; see collector/README.md for every option and setting. Options
override `VIGIL_...` environment variables, which override the `[collector]` table of
the `VIGIL_CONFIG` file.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vigil.app.cli.serving import serve

_OVERRIDES = {
    "host": "host", "job": "job_id", "sysfs_root": "sysfs_root", "procfs_root": "procfs_root",
    "spool_dir": "spool_dir", "fr_dir": "fr_dir", "state_dir": "state_dir", "output_dir": "output_dir",
    "heartbeat_interval": "heartbeat_interval", "nic_interval": "nic_interval", "rules_file": "rules_file",
    "kill_grace": "kill_grace_s", "drain_timeout": "drain_timeout_s", "log_dir": "log_dirs", "match": "process_match",
    "delivery_timeout": "delivery_timeout_s", "kmsg": "kmsg_path",
}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="host identity (default: VIGIL_HOST, else the hostname)")
    p.add_argument("--job", help="job id (default: VIGIL_JOB_ID, else 'default')")
    p.add_argument("--heartbeat-interval", type=float, metavar="S", help="seconds between heartbeats (default 2)")
    p.add_argument("--nic-interval", type=float, metavar="S", help="seconds between NIC samples (default 1)")
    p.add_argument("--sysfs-root", type=Path, metavar="DIR", help="sysfs root (default /sys; VIGIL_SYSFS_ROOT)")
    p.add_argument("--procfs-root", type=Path, metavar="DIR", help="procfs root (default /proc; VIGIL_PROCFS_ROOT)")
    p.add_argument("--spool-dir", type=Path, metavar="DIR", help="step timer spool (default $VIGIL_HOME/spool)")
    p.add_argument("--fr-dir", type=Path, metavar="DIR", help="Flight Recorder dumps (default $VIGIL_HOME/fr)")
    p.add_argument("--state-dir", type=Path, metavar="DIR",
                   help="outbox and offsets (default $VIGIL_HOME/agent/<host>)")
    p.add_argument("--kmsg", metavar="PATH", help="kernel log to follow for hardware faults (default /dev/kmsg; "
                   "'' for none; VIGIL_KMSG_PATH)")
    p.add_argument("--rules-file", type=Path, metavar="FILE", help="TOML file of [[rules]] (pattern, category, severity)")
    p.add_argument("--delivery-timeout", type=float, metavar="S", help="Kafka delivery timeout (default 5)")
    p.add_argument("--drain-timeout", type=float, metavar="S", help="at exit, seconds to deliver what is pending (default 10)")


def register(sub: Any) -> None:
    run = sub.add_parser("run", help="launch a training command under the node agent",
                         usage="vigil run [options] -- COMMAND [ARGS ...]")
    _common(run)
    run.add_argument("--output-dir", type=Path, metavar="DIR",
                     help="where the child's stdout/stderr files go (default $VIGIL_HOME/output)")
    run.add_argument("--kill-grace", type=float, metavar="S",
                     help="after forwarding SIGINT/SIGTERM, kill the tree after S seconds (default 30)")
    run.add_argument("--no-echo", action="store_true", help="do not echo the child's output")
    run.add_argument("--user", metavar="USER", help="run the command (and its warm interpreters) as this user "
                     "(name or uid; the agent keeps its own and must be root)")
    run.add_argument("--group", metavar="GROUP", help="... and this group (default: the user's)")
    from vigil.app.cli import controlled

    controlled.add_options(run)
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="COMMAND", help="the command to run, after --")
    run.set_defaults(handler=cmd_run)

    col = sub.add_parser("collector", help="run the node agent without launching anything (DaemonSet mode)")
    _common(col)
    col.add_argument("--log-dir", type=Path, action="append", metavar="DIR",
                     help="directory of *.log files to classify (repeatable)")
    col.add_argument("--match", metavar="REGEX", help="track processes whose command line matches")
    col.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: until SIGTERM)")
    col.set_defaults(handler=cmd_collector)


def _settings(args: argparse.Namespace) -> Any:
    from vigil.collector.settings import CollectorSettings

    overrides = {field: getattr(args, arg) for arg, field in _OVERRIDES.items() if getattr(args, arg, None) is not None}
    return CollectorSettings.load(**{**slurm_identity(os.environ), **overrides})


def slurm_identity(env: Mapping[str, str]) -> dict[str, str]:
    """Under `srun`: the host is the Slurm node this task runs on (the name a drain speaks of) and the job
    `slurm-<SLURM_JOB_ID>`, unless VIGIL_HOST / VIGIL_JOB_ID (or --host / --job) say otherwise."""
    from vigil.recovery.backends.slurm.allocation import Allocation, vigil_job_id

    alloc = Allocation.from_env(env, hostnames=lambda _: [])
    if alloc is None:
        return {}
    out = {"host": alloc.host, "job_id": vigil_job_id(alloc.job_id)}
    return {k: v for k, v in out.items() if not env.get(f"VIGIL_{k.upper()}")}


def _build(args: argparse.Namespace, *, launching: bool) -> tuple[Any, Any, dict[str, str]]:
    """(agent, paths, child environment additions); the agent's process made non-dumpable first."""
    from vigil.app.stack.state import resolve_bootstrap
    from vigil.collector.agent import Agent
    from vigil.collector.control.attest import Attester
    from vigil.collector.principal import job_key_file, protect
    from vigil.collector.procs import ProcessTracker
    from vigil.collector.settings import resolve_paths, snapshot_memory
    from vigil.collector.sink import KafkaSink
    from vigil.settings import VigilSettings
    from vigil.signing import Role
    from vigil.signing.setup import signer
    from vigil.trainside import env
    from vigil.trainside.identity import safe_name

    protect()  # before any secret is read: training code of this uid reads and traces nothing of the agent
    core = VigilSettings.load()
    settings = _settings(args)
    paths = resolve_paths(settings, core.home)
    host = safe_name(settings.host)
    child_env: dict[str, str] = {}
    fr_dirs: list[tuple[Path, str]] = []
    who = getattr(args, "run_as", None)
    if launching:
        spool_roots = [paths.spool_dir / host]
        child_env = {env.JOB_ID: settings.job_id, env.HOST: settings.host, env.SPOOL_DIR: str(spool_roots[0]),
                     env.SNAPSHOT_DIR: str(snapshot_memory(settings, settings.host))}
        fr_prefix = os.environ.get(env.FR_DUMP_PREFIX) or str(paths.fr_dir / host / "nccl_trace_rank_")
        child_env[env.FR_DUMP_PREFIX] = fr_prefix
        Path(fr_prefix).parent.mkdir(parents=True, exist_ok=True)
        given = os.environ.get(env.CHECKPOINT_KEY_FILE)  # the operator's, shared by the job's nodes; else made here
        child_env[env.CHECKPOINT_KEY_FILE] = str(job_key_file(  # a file of the command's uid, never the key itself
            core.home / "jobkeys", safe_name(settings.job_id), who, Path(given) if given else None))
        if who is not None:  # `--user`: the command writes its spool, traces and snapshots as its own uid
            for folder in (spool_roots[0], Path(fr_prefix).parent, snapshot_memory(settings, settings.host)):
                who.give(folder)
        fr_dirs.append((Path(fr_prefix).parent, Path(fr_prefix).name))
    else:
        spool_roots = [paths.spool_dir]
        fr_dirs.append((paths.fr_dir, ""))
        if prefix := os.environ.get(env.FR_DUMP_PREFIX):
            fr_dirs.append((Path(prefix).parent, Path(prefix).name))
    sink = KafkaSink(settings=core, bootstrap=lambda: resolve_bootstrap(core), timeout_s=settings.delivery_timeout_s)
    agent = Agent(settings=settings, paths=paths, sink=sink, spool_roots=spool_roots, fr_dirs=fr_dirs,
                  log_dirs=list(settings.log_dirs), tracker=ProcessTracker(match=settings.process_match),
                  serves_one_job=launching)
    key = signer(Role.AGENT, core.home, host=settings.host)  # this host's own key: `vigil keys issue HOST`
    if key is not None:  # its hardware facts (kernel log, NVML, sysfs) decide only attested by it
        agent.attest = agent.spool.attest = Attester(host=settings.host, job_id=settings.job_id, seal=key.seal).attest
    return agent, paths, child_env


def cmd_run(args: argparse.Namespace) -> int:
    from vigil.collector.control.childenv import child_environment
    from vigil.collector.control.launcher import Launcher
    from vigil.collector.principal import run_as, scrub_secrets
    from vigil.trainside.identity import safe_name

    args.run_as = run_as(args.user, args.group)  # refused (not root, no such user) before anything starts
    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise ValueError("no command given (usage: vigil run [options] -- COMMAND [ARGS ...])")
    agent, paths, child_env = _build(args, launching=True)
    s = agent.settings
    env = child_environment(os.environ, child_env)  # no vigil credential reaches training code
    env.setdefault("PYTHONUNBUFFERED", "1")

    def launcher_for(argv: list[str], env: dict[str, str]) -> Launcher:
        return Launcher(argv=argv, env=env, agent=agent,
                        output_dir=paths.output_dir / safe_name(s.job_id) / safe_name(s.host),
                        max_bytes=int(s.output_max_mb * 2**20), keep=s.output_keep, kill_grace_s=s.kill_grace_s,
                        echo=not args.no_echo, attribute=s.attribute_ranks, run_as=args.run_as)

    if args.nodes:  # under recovery control: the controller starts, stops and restarts the command
        from vigil.app.cli import controlled

        return controlled.run(args, agent=agent, paths=paths, argv=command, env=env, launcher_for=launcher_for)
    launcher = launcher_for(command, env)
    scrub_secrets()  # every setting was read: no secret stays in the agent's environment
    agent.start()
    try:
        status = launcher.run()
    finally:
        agent.stop()
    return status


def cmd_collector(args: argparse.Namespace) -> int:
    from vigil.collector.principal import scrub_secrets

    agent, _paths, _env = _build(args, launching=False)
    scrub_secrets()
    return serve(agent, name="collector", duration=args.duration, banner=lambda: "collector running; Ctrl-C stops it.")
