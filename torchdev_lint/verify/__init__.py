"""Runtime verification of fixes (`torchdev-lint verify`); imports torch only when it runs.

A fixture is a script in `fixtures/` with a literal `CODES` tuple (codes it must be reported
for), a literal `DEFAULT_N` int and `def main(device: torch.device, n: int) -> object`
returning tensors (or a nested structure of them). The verifier lints it, fixes it into a temp
folder with the project's fixer, runs both versions in sandboxed fresh processes, compares the
results and measures throughput, H2D/D2H copies and syncs. docs/verify.md has the details.
"""
