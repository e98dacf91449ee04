"""Cost of signed decisions: Ed25519 sign and verify per event, canonical encoding included.

For each decision kind (a start command, a controller step, an incident with culprits and
victims, a silence): the time to sign one event (canonical JSON + Ed25519 + the model copy that
carries the signature) and to verify one (canonical JSON + key lookup + Ed25519 verify), best of
`--repeats` runs of `--n` events, and the size the signature adds on the wire.

    python bench/signing.py [--n 2000] [--repeats 5] [--hosts 64] [--no-append]

And per recovery: the controller's engine (pure, agents simulated as in tests/support/fleet.py)
recovers a `--hosts`-host job from a hardware fault (pause, diagnose, cordon, restart); every
decision it published and the incident that started it are signed once and verified once per
reader (a command by its agent; a step, plan or outcome by the controller's fold, the notifier and
the dashboard; the incident by the controller and the notifier): their total time beside the
recovery's seconds.

Prints a table and appends a dated section to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyzer_common import append_results, machine_info

from vigil.contract import Command, Event, Incident, RankRef, RecoveryAction, Silence, World
from vigil.signing import KeyStore, Role
from vigil.signing.seal import Ed25519Signer, KeyRing


def events() -> dict[str, tuple[Role, Event]]:
    now = datetime.now(UTC)
    world = World(generation=3, hosts=[f"node-{i:04d}" for i in range(64)], node_rank=7, master_addr="node-0000",
                  master_port=29500)
    return {
        "command (start, 64-host world)": (Role.CONTROLLER, Command(
            job_id="llama", host="node-0007", command_id="llama/g3/start/node-0007", action="start", generation=3,
            world=world, epoch=12)),
        "recovery step": (Role.CONTROLLER, RecoveryAction(
            job_id="llama", host="controller", action="cordon", target="node-0007", status="started",
            incident_id="llama/host_fault/node-0007/1", actor="controller", epoch=12, details={"why": "xid 79"})),
        "incident (1 culprit, 255 victims)": (Role.ANALYZER, Incident(
            job_id="llama", host="node-0007", incident_id="llama/collective_hang/node-0007", category="collective_hang",
            cause="network", status="open", severity="critical", summary="rank 57 hung in all_reduce",
            culprits=[RankRef(host="node-0007", rank=57, message="Timed out waiting 600000ms")],
            victims=[RankRef(host=f"node-{i // 8:04d}", rank=i) for i in range(256) if i != 57],
            first_sign=now, detected=now)),
        "silence": (Role.OPERATOR, Silence(
            job_id="llama", host="*", silence_id="abc123", matchers={"job": "llama", "kind": "straggler"},
            starts_at=now, ends_at=now + timedelta(hours=2), created_by="alice", reason="draining node-0007")),
    }


def best_us(fn: Callable[[], object], n: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def recovery_cost(store: KeyStore, ring: KeyRing, hosts: int, repeats: int) -> tuple[int, float, float]:
    """(decisions, sign ms, verify ms) of one simulated hardware-fault recovery of a `hosts`-host job."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.fleet import Fleet, Harness, incident  # type: ignore[import-not-found]

    with tempfile.TemporaryDirectory() as tmp:
        fleet = Fleet(job="bench", hosts=[f"h{i}" for i in range(hosts)], nodes=(hosts // 2, hosts, 1))
        h = Harness.build(fleet, Path(tmp))
        h.run(lambda: h.training(1))
        before = len(h.fx.events)
        h.feed(fleet.commit(10, h.now) + fleet.crash(f"h{hosts - 1}", h.now))
        inc = incident("bench", f"h{hosts - 1}", at=h.now)
        h.feed([inc])
        h.run(lambda: h.training(2))
    decided = [e for e in h.fx.events[before:] if isinstance(e, (Command, RecoveryAction))]
    readers = [(Role.ANALYZER, inc, 2)] + [
        (Role.CONTROLLER, e, 1 if isinstance(e, Command) else 3) for e in decided]  # who reads each decision
    signers = {role: Ed25519Signer(role=role, key_id=store.private_key(role)[0], key=store.private_key(role)[1])
               for role in (Role.ANALYZER, Role.CONTROLLER)}
    best_sign = best_verify = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        sealed = [(signers[role].seal(e), n) for role, e, n in readers]
        t1 = time.perf_counter()
        for e, n in sealed:
            for _ in range(n):
                assert ring.signer_of(e) is not None
        t2 = time.perf_counter()
        best_sign, best_verify = min(best_sign, t1 - t0), min(best_verify, t2 - t1)
    return len(readers), best_sign * 1000, best_verify * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hosts", type=int, default=64, help="hosts of the recovered job (per-recovery cost)")
    ap.add_argument("--no-append", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = KeyStore(Path(tmp) / "keys")
        store.ensure()
        ring = KeyRing(load=store.public_keys)
        rows = []
        for name, (role, event) in events().items():
            kid, key = store.private_key(role)
            signer = Ed25519Signer(role=role, key_id=kid, key=key)
            signed = signer.seal(event)
            assert ring.signer_of(signed) is role
            sign_us = best_us(lambda s=signer, e=event: s.seal(e), args.n, args.repeats)  # type: ignore[misc]
            verify_us = best_us(lambda e=signed: ring.signer_of(e), args.n, args.repeats)  # type: ignore[misc]
            size = len(event.model_dump_json())
            extra = len(signed.model_dump_json()) - size
            rows.append(f"| {name} | {size} | {extra} | {sign_us:.1f} | {verify_us:.1f} |")
        decisions, sign_ms, verify_ms = recovery_cost(store, ring, args.hosts, args.repeats)
    table = "\n".join(["| decision | JSON bytes | signature adds (bytes) | sign µs/event | verify µs/event |",
                       "| --- | --- | --- | --- | --- |", *rows])
    table += (f"\n\nOne hardware-fault recovery of a {args.hosts}-host job (pause, diagnose, cordon, restart): "
              f"{decisions} signed decisions (the incident included), signing {sign_ms:.1f} ms and verifying by "
              f"their readers {verify_ms:.1f} ms in all, spread over the recovery's seconds (a crash resumed in "
              f"16.7 s, recovery_time.py): {100 * (sign_ms + verify_ms) / 16_700:.2f} % of it.")
    print(table)
    if not args.no_append:
        body = (f"{machine_info()}\n\nBest of {args.repeats} runs of {args.n} events; sign = canonical JSON + "
                f"Ed25519 + the copy carrying the signature, verify = canonical JSON + Ed25519 verify.\n\n{table}\n\n"
                f"Command: `python bench/signing.py --n {args.n} --repeats {args.repeats} --hosts {args.hosts}`.\n")
        append_results("Signed decisions: sign and verify cost per event", body)
        print("appended to bench/RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
