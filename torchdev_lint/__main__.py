from torchdev_lint.cli import entry

entry()
