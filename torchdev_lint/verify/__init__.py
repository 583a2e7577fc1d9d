"""Runtime verification of fixes; imports torch only when it runs."""
