"""Loaders, datasets, batches and what loops do with them: pinning, per-item and invariant moves, host reads per iteration."""
