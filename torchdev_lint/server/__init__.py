"""The language server: `torchdev-lint server` (LSP over stdio), installed with the `[lsp]` extra."""
