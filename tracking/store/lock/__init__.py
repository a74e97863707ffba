"""One driver per sweep and store: the lock, held in the store itself (sweep_lock.py)."""
