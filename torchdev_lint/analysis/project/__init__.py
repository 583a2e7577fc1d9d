"""The project: the module index, pass 1 summaries and their cache, the fixed point, parameter boundaries, constructor defaults, what each file's check receives."""
