"""Execution, the third stage: Ray (cluster, schedule, task), one trial process per trial, remeasure
rounds, the progress line and the sweep's log. Imports planning and pricing only; what becomes of a
result is the delivery's outbox, handed in by the driver."""
