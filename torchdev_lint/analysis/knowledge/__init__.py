"""What torch and other libraries do, as data: torch's API table, library models, device vocabulary, CUDA-only module names, legacy tensor types."""
