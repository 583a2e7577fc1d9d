"""Files: what the project saves and loads, from which memory, under which identity; what functions return."""
