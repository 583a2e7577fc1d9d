"""Where a fix puts a device: the module's device variable, TDL301's uses and edits, accelerators a fix must serve."""
