"""Delivery, the last stage: the journal, the outbox that sends it to the store, a full disk, the
sweep's run and its report."""
