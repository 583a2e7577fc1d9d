"""Where code runs: CUDA required here (gates, imports, callers), process groups, availability checks, setup code, profiling, parallel choices."""
