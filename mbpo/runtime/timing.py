"""Every polling interval and time limit of the runtime, in one place (seconds).

The user-facing limits are config keys (``runtime.collector_timeout_s``, ``runtime.shutdown_timeout_s``);
these are the runtime's own, chosen so that a stop, a failure or a hang is seen within a fraction of a
second without the waiting threads costing measurable CPU.
"""

from __future__ import annotations

__all__ = ["POLL_S", "SUPERVISE_EVERY_S", "UNOBSERVED_S", "TERM_GRACE_S", "PROCESS_START_TIMEOUT_S",
           "RAY_START_TIMEOUT_S", "RAY_BEAT_EVERY_S", "STUCK_LOCK_S", "SEQLOCK_RETRY_S"]

POLL_S = 0.05
"""How often a waiting thread (queue, gate, ring, a collector's pipe or Ray ref) checks for a stop."""
SUPERVISE_EVERY_S = 0.5
"""The learner checks its workers at least this often, even inside a long chunk of updates."""
UNOBSERVED_S = 5.0
"""A gap this long between two of those checks means the trainer did not run (a SIGSTOP, a debugger, a
suspended VM, one very long call): collector hang timers leave it out, since threads stopped with it."""
TERM_GRACE_S = 2.0
"""A collector process asked to end gets SIGTERM, then SIGKILL after this long."""
PROCESS_START_TIMEOUT_S = 120.0
"""From spawn to "ready": a new interpreter, torch's imports, the env and the policy (seconds each, more with
several children on few cores); timed apart from runtime.collector_timeout_s."""
RAY_START_TIMEOUT_S = 300.0
"""Placing a collector actor, starting its worker process, building its env and policy."""
RAY_BEAT_EVERY_S = 1.0
"""How often the driver asks a busy actor how long ago it last stepped (its heartbeat)."""
STUCK_LOCK_S = 1.0
"""The weight store's lock guards a few integers: held longer than this, its holder died inside it."""
SEQLOCK_RETRY_S = 0.0005
"""A reader overtaken by two weight publications waits this long before it copies again."""
