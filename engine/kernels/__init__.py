"""The C++ CPU kernels (csrc/) and their loader, shared by attention and the layers."""
