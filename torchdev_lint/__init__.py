"""torchdev-lint: find and fix PyTorch device anti-patterns.

Importing this package never imports torch: linting needs only libcst.
"""

__version__ = "0.1.0"
