"""What one file's tree says: traversal, bindings, scopes, the units the analyses walk, quoting."""
