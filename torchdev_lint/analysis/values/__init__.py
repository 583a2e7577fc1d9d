"""What a value is and where it lives: the device-flow interpreter, kinds, host data by construction, tensors a module stores."""
