"""What runs a step on the device: batch preparation, the model runner, sampling, CUDA graphs."""
